"""join_adjacent (training examples of 1 to N adjacent pairs, a plain space between) in the
stock onmt_build_vocab, on real toy-ende lines, behind EXTRAPOLATE's filtertoolong."""
import collections

import onmt  # noqa: F401  (activates the extension in this process too)
from conftest import TOY_ENDE, command, head, run, write_yaml

from onmt_posenc.core.text import opennmt_tokens, read_lines

LINES = 400  # a multiple of 4: with -num_threads 2, onmt_build_vocab's sample writer drops nothing
CAP = 20  # toy-ende's training lines run up to 50 tokens: about half pass


def build_vocab(workdir, transforms, expect_ok=True, **options):
    """onmt_build_vocab on every line with 2 threads, the transformed examples dumped to sample/."""
    src = head(TOY_ENDE / "src-train.txt", workdir / "train.src", LINES)
    tgt = head(TOY_ENDE / "tgt-train.txt", workdir / "train.tgt", LINES)
    config = {"data": {"c": {"path_src": str(src), "path_tgt": str(tgt), "transforms": transforms}},
              "save_data": str(workdir / "samples"), "src_vocab": str(workdir / "vocab.src"),
              "tgt_vocab": str(workdir / "vocab.tgt"), "overwrite": True, "seed": 5,
              "src_seq_length": CAP, "tgt_seq_length": CAP + 2, **options}
    path = write_yaml(workdir / "build_vocab.yaml", config)
    result = run([command("onmt_build_vocab"), "-config", path, "-n_sample", "-1", "-dump_samples",
                  "-num_threads", "2"], expect_ok=expect_ok, timeout=300)
    return result, src, tgt


def kept_pairs(src, tgt):
    """The lines as OpenNMT-py reads them, which the cap keeps, and which start an example: the
    corpus reader skips an empty line (toy-ende's source line 5) before any transform sees it,
    but as a neighbour it is read from the file and joined as an empty segment."""
    sides = [[opennmt_tokens(line) for line in read_lines(path)] for path in (src, tgt)]
    kept = [len(s) <= CAP and len(t) <= CAP for s, t in zip(*sides)]
    starts = [ok and any(s) and any(t) for ok, s, t in zip(kept, *sides)]
    return sides, kept, starts


def test_each_kept_pair_starts_one_example_of_adjacent_kept_pairs(tmp_path):
    _, src, tgt = build_vocab(tmp_path, ["filtertoolong", "join_adjacent"], join_adjacent_max=3)
    (s_lines, t_lines), kept, starts = kept_pairs(src, tgt)
    assert not all(kept) and not all(starts)  # so that the checks below mean something
    sample = tmp_path / "sample" / "c.sample"
    examples = list(zip(read_lines(f"{sample}.src"), read_lines(f"{sample}.tgt")))
    assert len(examples) == sum(starts)  # one example per pair the cap keeps, none lost to threads
    counts = collections.Counter()
    for src_line, tgt_line in examples:
        # the run of lines this example joins: from a line that starts one, through kept lines
        matches = []
        for start in (i for i, ok in enumerate(starts) if ok):
            for k in (1, 2, 3):
                members = range(start, start + k)
                if members[-1] >= LINES or not all(kept[i] for i in members):
                    break
                if (" ".join(tok for i in members for tok in s_lines[i] if tok) == src_line
                        and " ".join(tok for i in members for tok in t_lines[i] if tok) == tgt_line):
                    matches.append(k)
        assert matches, f"not a run of adjacent kept pairs: {src_line!r}"
        counts[min(matches)] += 1
        assert "<sep>" not in src_line.split()  # a plain space, no separator token
    # k ~ U{1, 2, 3}, shortened where a dropped pair follows: every length occurs
    assert set(counts) == {1, 2, 3}, counts
    assert counts[1] > counts[3]


def test_the_draw_differs_between_seeds_and_repeats_with_one(tmp_path):
    def sample(workdir, seed):
        workdir.mkdir()
        build_vocab(workdir, ["filtertoolong", "join_adjacent"], seed=seed)
        return read_lines(workdir / "sample" / "c.sample.src")

    first, again, other = sample(tmp_path / "a", 5), sample(tmp_path / "b", 5), sample(tmp_path / "c", 6)
    assert sorted(first) == sorted(again)
    assert sorted(first) != sorted(other)


def test_one_at_most_is_the_filtered_corpus_itself(tmp_path):
    _, src, tgt = build_vocab(tmp_path, ["filtertoolong", "join_adjacent"], join_adjacent_max=1)
    (s_lines, _), _, starts = kept_pairs(src, tgt)
    dumped = sorted(read_lines(tmp_path / "sample" / "c.sample.src"))
    assert dumped == sorted(" ".join(s_lines[i]) for i, ok in enumerate(starts) if ok)


def test_document_ids_are_refused(tmp_path):
    docids = tmp_path / "train.docids"
    docids.write_text("d\n" * LINES, encoding="utf-8")
    result, _, _ = build_vocab(tmp_path, ["join_adjacent"], expect_ok=False)
    assert result.returncode == 0  # without document ids it runs
    config = tmp_path / "build_vocab.yaml"
    text = config.read_text(encoding="utf-8").replace("transforms:", f"path_docids: {docids}\n    transforms:", 1)
    config.write_text(text, encoding="utf-8")
    result = run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"], expect_ok=False, timeout=300)
    assert result.returncode != 0
    assert "join_adjacent joins neighbours in the file and reads no document ids" in result.stderr
