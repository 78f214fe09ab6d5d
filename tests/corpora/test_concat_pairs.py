"""concat_pairs (INTERPOLATE) in the stock OpenNMT-py commands, on real toy-ende lines."""
import onmt  # noqa: F401  (activates the extension in this process too)
import pyonmttok
import pytest
import sentencepiece
import torch
from conftest import TOY_ENDE, command, head, run, tiny_transformer, write_yaml
from onmt import opts as onmt_opts
from onmt.constants import CorpusTask
from onmt.inputters.dynamic_iterator import build_dynamic_dataset_iter
from onmt.inputters.inputter import build_vocab
from onmt.inputters.text_corpus import ParallelCorpus, ParallelCorpusIterator
from onmt.transforms import TransformPipe, get_specials, get_transforms_cls
from onmt.utils.parse import ArgumentParser
from subword_nmt.apply_bpe import BPE

from onmt_posenc.core.joining import group_bounds, join_lines, join_segments
from onmt_posenc.core.text import opennmt_tokens, read_lines
from onmt_posenc.hooks.data_pipeline import file_line

SEP = "<sep>"
LINES = 200  # a multiple of 4: with -num_threads 2, onmt_build_vocab's sample writer drops nothing
N = 7  # 28 groups of 7 and a last group of 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """200 real pairs; source line 5 is empty (kept on purpose upstream)."""
    workdir = tmp_path_factory.mktemp("concat_pairs")
    src = head(TOY_ENDE / "src-train.txt", workdir / "train.src", LINES)
    tgt = head(TOY_ENDE / "tgt-train.txt", workdir / "train.tgt", LINES)
    assert read_lines(src)[4] == ""
    return workdir, src, tgt


def expected_groups(src, tgt, tokenize=lambda tokens: tokens):
    """Sorted (source, target) lines of the groups, each member tokenized on its own."""
    sides = []
    for path in (src, tgt):
        lines = read_lines(path)
        sides.append([
            " ".join(join_segments([tokenize(opennmt_tokens(lines[i])) for i in range(start, end)], SEP))
            for start, end in group_bounds(len(lines), N)
        ])
    return sorted(zip(*sides))


def dumped(workdir, corpus_name):
    sample = workdir / "sample" / f"{corpus_name}.sample"
    return sorted(zip(read_lines(f"{sample}.src"), read_lines(f"{sample}.tgt")))


def build_vocab_with_samples(workdir, corpora, expect_ok=True, **options):
    """onmt_build_vocab on every line, 2 threads, transformed examples dumped to workdir/sample."""
    # Without the file-line numbering, a 2-thread -dump_samples run hangs on its first error.
    assert hasattr(ParallelCorpusIterator._process, "__wrapped__"), "onmt_posenc.hooks.plugin must number " \
        "examples by file line"
    workdir.mkdir(exist_ok=True)
    config = {
        "data": corpora,
        "save_data": str(workdir / "samples"),
        "src_vocab": str(workdir / "vocab.src"),
        "tgt_vocab": str(workdir / "vocab.tgt"),
        "overwrite": True,
        "concat_n": N,
        **options,
    }
    path = write_yaml(workdir / "build_vocab.yaml", config)
    return run([command("onmt_build_vocab"), "-config", path, "-n_sample", "-1", "-dump_samples",
                "-num_threads", "2"], expect_ok=expect_ok, timeout=300)


def pipelines(src, tgt, tokenizer_name):
    """The tokenizer before and after concat_pairs, as two corpora of one config."""
    return {
        f"{tokenizer_name}_{order}": {"path_src": str(src), "path_tgt": str(tgt), "transforms": transforms}
        for order, transforms in (("before", [tokenizer_name, "concat_pairs"]),
                                  ("after", ["concat_pairs", tokenizer_name]))
    }


@pytest.fixture(scope="module")
def bpe_run(corpus):
    """One onmt_build_vocab run: plain concat_pairs, and onmt_tokenize / bpe before and after it."""
    workdir, src, tgt = corpus
    codes = workdir / "bpe.codes"
    learner = pyonmttok.BPELearner(tokenizer=pyonmttok.Tokenizer("space"), symbols=300)
    for path in (src, tgt):
        learner.ingest_file(str(path))
    learner.learn(str(codes))
    corpora = {"plain": {"path_src": str(src), "path_tgt": str(tgt), "transforms": ["concat_pairs"]}}
    corpora.update(pipelines(src, tgt, "onmt_tokenize"))
    corpora.update(pipelines(src, tgt, "bpe"))
    onmttok_kwargs = "{'mode': 'aggressive', 'joiner_annotate': True}"
    build_vocab_with_samples(
        workdir, corpora, src_subword_model=str(codes), tgt_subword_model=str(codes),
        src_subword_type="bpe", tgt_subword_type="bpe",
        src_onmttok_kwargs=onmttok_kwargs, tgt_onmttok_kwargs=onmttok_kwargs,
    )
    return workdir, codes


def test_groups_are_adjacent_file_lines_with_two_threads(corpus, bpe_run):
    workdir, src, tgt = corpus
    groups = dumped(workdir, "plain")
    assert len(groups) == 29
    assert groups == expected_groups(src, tgt)
    # the same groups as the offline tool writes for dev/test sets
    assert groups == sorted(zip(join_lines(read_lines(src), N, SEP), join_lines(read_lines(tgt), N, SEP)))


def test_separator_is_one_vocabulary_token(corpus, bpe_run):
    workdir, _, _ = corpus
    counts = dict(line.split("\t") for line in read_lines(workdir / "vocab.src"))
    # 5 corpora x (28 groups x 6 separators + 1 group x 3)
    assert int(counts[SEP]) == 5 * (28 * 6 + 3)
    assert not any(token != SEP and "sep" in token and "<" in token for token in counts)


def test_onmt_tokenize_before_or_after_never_splits_separator(corpus, bpe_run):
    workdir, src, tgt = corpus
    _, codes = bpe_run
    tokenizer = pyonmttok.Tokenizer("aggressive", joiner_annotate=True, bpe_model_path=str(codes))
    assert tokenizer.tokenize(SEP)[0] != [SEP]  # so the check below means something
    expected = expected_groups(src, tgt, lambda tokens: tokenizer.tokenize(" ".join(tokens))[0])
    assert dumped(workdir, "onmt_tokenize_before") == expected
    assert dumped(workdir, "onmt_tokenize_after") == expected


def test_bpe_before_or_after_never_splits_separator(corpus, bpe_run):
    workdir, src, tgt = corpus
    _, codes = bpe_run
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    assert bpe.segment_tokens([SEP]) != [SEP]
    expected = expected_groups(src, tgt, bpe.segment_tokens)
    assert dumped(workdir, "bpe_before") == expected
    assert dumped(workdir, "bpe_after") == expected


def test_sentencepiece_before_or_after_never_splits_separator(corpus):
    workdir, src, tgt = corpus
    workdir = workdir / "sentencepiece"
    workdir.mkdir()
    model = workdir / "sp.model"
    learner = pyonmttok.SentencePieceLearner(vocab_size=400, character_coverage=1.0)
    for path in (src, tgt):
        learner.ingest_file(str(path))
    learner.learn(str(model))
    build_vocab_with_samples(workdir, pipelines(src, tgt, "sentencepiece"),
                             src_subword_model=str(model), tgt_subword_model=str(model))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    assert sp.encode(SEP, out_type=str) != [SEP]
    expected = expected_groups(src, tgt, lambda tokens: sp.encode(" ".join(tokens), out_type=str))
    assert dumped(workdir, "sentencepiece_before") == expected
    assert dumped(workdir, "sentencepiece_after") == expected


def test_line_already_holding_the_separator_is_an_error(corpus):
    workdir, src, tgt = corpus
    lines = read_lines(src)
    lines[36] = lines[36].replace(" ", f" {SEP} ", 1)
    bad = workdir / "bad.src"
    bad.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = build_vocab_with_samples(workdir / "bad", {"c": {"path_src": str(bad), "path_tgt": str(tgt),
                                                              "transforms": ["concat_pairs"]}}, expect_ok=False)
    assert result.returncode != 0
    assert f"{bad}:37: the line already contains the concat_pairs separator '{SEP}'" in result.stderr


def test_mismatched_line_counts_is_an_error(corpus):
    workdir, src, tgt = corpus
    short = head(tgt, workdir / "short.tgt", LINES - 1)
    result = build_vocab_with_samples(workdir / "short", {"c": {"path_src": str(src), "path_tgt": str(short),
                                                                "transforms": ["concat_pairs"]}}, expect_ok=False)
    assert result.returncode != 0
    assert f"{src} has {LINES} lines but {short} has {LINES - 1}; {src}:{LINES} has no partner line" in result.stderr


def test_file_line_is_the_line_opennmt_reads():
    lines = [f"line{i}" for i in range(53)]
    corpus = ParallelCorpus("c", lines, lines)
    for stride in range(1, 6):
        for offset in range(stride):
            for read, example in enumerate(corpus.load(offset=offset, stride=stride)):
                assert example["src"] == lines[file_line(read, stride, offset)]


def test_plugin_numbers_examples_by_file_line():
    lines = [f"line{i}" for i in range(53)]
    corpus = ParallelCorpus("c", lines, lines)
    seen = []
    for offset in range(3):
        for example, _, _ in ParallelCorpusIterator(corpus, TransformPipe.build_from([]), stride=3, offset=offset):
            assert example["src"] == [lines[example["cid_line_number"]]]
            seen.append(example["cid_line_number"])
    assert sorted(seen) == list(range(53))


def test_every_reader_gets_a_share_of_groups():
    """The rotating trigger: with OpenNMT-py's striping (blocks of `stride` lines), every
    reader emits groups; triggering on the first line would starve some (stride 2, N 4)."""
    for stride in range(1, 17):
        for n in range(1, 21):
            readers = set()
            for start, end in group_bounds(40 * stride * stride * n, n):
                trigger = start + (start // n) % (end - start)
                readers.add((trigger // stride) % stride)
            assert readers == set(range(stride)), (stride, n)


def decoded(vocab, ids, length):
    return " ".join(vocab.ids_to_tokens[i] for i in ids[:length].tolist())


def write_vocab(path, *corpus_files):
    """A counts file of every token of the files, as onmt_build_vocab writes one (no <sep>)."""
    tokens = sorted({t for f in corpus_files for line in read_lines(f) for t in opennmt_tokens(line)})
    path.write_text("".join(f"{t}\t1\n" for t in tokens), encoding="utf-8")


def test_validation_batches_of_four_readers(tmp_path):
    """onmt_train's valid iterator read by 4 readers (ranks x workers stride the lines
    alike): every group exactly once, though two readers get no group at all."""
    src = head(TOY_ENDE / "src-val.txt", tmp_path / "valid.src", 150)
    tgt = head(TOY_ENDE / "tgt-val.txt", tmp_path / "valid.tgt", 150)
    write_vocab(tmp_path / "vocab.src", src)
    write_vocab(tmp_path / "vocab.tgt", tgt)
    config = write_yaml(tmp_path / "valid.yaml", {
        "data": {"c": {"path_src": str(src), "path_tgt": str(tgt)},
                 "valid": {"path_src": str(src), "path_tgt": str(tgt), "transforms": ["concat_pairs"]}},
        "src_vocab": str(tmp_path / "vocab.src"), "tgt_vocab": str(tmp_path / "vocab.tgt"),
        "save_model": str(tmp_path / "m"), "concat_n": N, "num_workers": 0, "valid_batch_size": 400,
    })
    parser = ArgumentParser()
    onmt_opts.train_opts(parser)
    opt = parser.parse_args(["-config", str(config)])
    ArgumentParser.validate_prepare_opts(opt)
    transforms_cls = get_transforms_cls(opt._all_transform)
    vocabs = build_vocab(opt, get_specials(opt, transforms_cls))
    assert vocabs["src"][SEP] != vocabs["src"]["<unk>"]  # a special, though not in the counts file
    got = []
    for reader in range(4):
        batches = build_dynamic_dataset_iter(opt, transforms_cls, vocabs, task=CorpusTask.VALID,
                                             stride=4, offset=reader)
        for batch, _ in batches:
            for row in range(batch["src"].size(0)):
                got.append((decoded(vocabs["src"], batch["src"][row, :, 0], batch["srclen"][row]),
                            decoded(vocabs["tgt"], batch["tgt"][row, 1:, 0], batch["tgtlen"][row] - 2)))
    assert sorted(got) == expected_groups(src, tgt)


def test_onmt_train_and_validation_with_two_workers(tmp_path):
    """Training and validation on joined pairs in spawned data workers; the vocabulary
    has no <sep>, so it reaches the model as a special token."""
    config = tiny_transformer(tmp_path, train_steps=4, valid_steps=4, num_workers=2, prefetch_factor=2,
                              concat_n=N)
    for corpus_config in config["data"].values():
        corpus_config["transforms"] = ["concat_pairs"]
    write_vocab(tmp_path / "vocab.src", tmp_path / "train.src", tmp_path / "valid.src")
    write_vocab(tmp_path / "vocab.tgt", tmp_path / "train.tgt", tmp_path / "valid.tgt")
    result = run([command("onmt_train"), "-config", write_yaml(tmp_path / "train.yaml", config)])
    assert "Validation perplexity" in result.stdout + result.stderr
    checkpoint = torch.load(tmp_path / "model_step_4.pt")
    assert SEP in checkpoint["vocab"]["src"] and SEP in checkpoint["vocab"]["tgt"]
