"""The paper's analyses on tiny APE and SHAPE models trained here on real toy-ende data,
each through its `onmt-posenc` command and through its functions."""
import json
import re

import onmt  # noqa: F401  (activates the extension in this process too)
import pytest
import torch
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, train_tiny, write_yaml

from onmt_posenc.analysis import (
    length_buckets,
    models,
    position_ablation,
    shift_invariance,
    speed,
    swapped,
    token_nll,
)
from onmt_posenc.core.scoring import corpus_bleu
from onmt_posenc.core.joining import join_lines
from onmt_posenc.core.text import read_lines, write_lines

STEPS = 300  # enough for APE and SHAPE to differ in shift invariance (0.68 vs 0.78 measured)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An APE and a SHAPE (K=500) model, same data, vocabulary, seed and steps; and eval files."""
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("analysis"))
    for name, extra in (("ape", {}), ("shape", {"shape_max_shift": 500})):
        train_tiny(workdir, name, train_steps=STEPS, **extra)
    translate_config = write_yaml(workdir / "translate.yaml", {"beam_size": 2, "max_length": 40})
    src = head(TOY_ENDE / "src-test.txt", workdir / "test.src", 30)
    for name in ("ape", "shape"):
        run([command("onmt_translate"), "-config", translate_config, "-model", workdir / f"{name}_step_{STEPS}.pt",
             "-src", src, "-output", workdir / f"{name}.hyp"])
    files = {
        "src": src,
        "tgt": head(TOY_ENDE / "tgt-test.txt", workdir / "test.tgt", 30),
        "train_src": workdir / "train.src",
        "train_tgt": workdir / "train.tgt",
        "translate_config": translate_config,
    }
    return {"dir": workdir, "ape": workdir / f"ape_step_{STEPS}.pt", "shape": workdir / f"shape_step_{STEPS}.pt",
            **files}


def test_gold_log_probs_equal_onmt_translate_gold_scores(trained):
    """Our teacher-forced token NLLs sum to OpenNMT-py's GOLD SCORE of each sentence."""
    result = run([command("onmt_translate"), "-model", trained["ape"], "-src", trained["src"], "-tgt", trained["tgt"],
                  "-output", trained["dir"] / "gold.hyp", "-verbose", "-max_length", "40"])
    # Per sentence "GOLD SCORE: x" on a line of its own (the total comes after a log prefix).
    gold = [float(x) for x in re.findall(r"^GOLD SCORE: (-?[\d.]+)$", result.stderr, re.M)]
    loaded = models.load_model(trained["ape"])
    src, tgt = models.read_token_lines(trained["src"]), models.read_token_lines(trained["tgt"])
    ours = [-sum(nll) for nll in token_nll.token_nlls(loaded, src, tgt, max_tokens=300)]
    assert len(gold) == len(ours) == 30
    assert ours == pytest.approx(gold, abs=2e-3)


def test_shift_invariance_command_and_sanity(trained):
    out = trained["dir"] / "shift"
    matrices = {}
    for name in ("ape", "shape"):
        result = run([command("onmt-posenc"), "shift-invariance", "--model", trained[name], "--src", trained["src"],
                      "--plot", f"{out}_{name}.png", "--json", f"{out}_{name}.json"])
        assert "warning" not in result.stderr  # the model's own kind of text
        result = json.loads(open(f"{out}_{name}.json").read())
        assert result["offsets"] == [0, 100, 250, 500]
        matrix = torch.tensor(result["matrix"])
        assert matrix.shape == (4, 4)
        assert torch.allclose(matrix.diagonal(), torch.ones(4), atol=1e-5)  # identical offsets
        assert torch.allclose(matrix, matrix.T, atol=1e-6)
        assert (matrix <= 1 + 1e-5).all() and (matrix > -1).all()
        assert open(f"{out}_{name}.png", "rb").read(8) == PNG_MAGIC
        assert result["mean_off_diagonal"] == pytest.approx(((matrix.sum() - 4) / 12).item(), abs=1e-6)
        matrices[name] = result["mean_off_diagonal"]
    # APE's encoder changes when its positions move: a sinusoid of about the embeddings' norm is
    # added at offsets 100-500 apart, whatever the training. (Whether SHAPE's training makes its
    # encoder more invariant is a claim about trained models, judged in the committed reports:
    # a model of a few updates on this CPU's numerics does not decide it.)
    assert matrices["ape"] < 0.95


def test_offset_zero_reproduces_the_model(trained):
    """The offset module at k=0 gives exactly the trained encoder's states."""
    loaded = models.load_model(trained["ape"])
    src = models.read_token_lines(trained["src"], 5)
    batch = next(models.batches(loaded.vocabs, src))
    with torch.no_grad():
        plain = models.encode(loaded.model, batch)
        with models.position_module_replaced(loaded.model, "src", shift_invariance.offset_encoding(loaded, 0)):
            shifted = models.encode(loaded.model, batch)
    assert torch.equal(plain, shifted)


def test_offset_zero_is_a_randomized_models_own_evaluation_positions():
    """Randomized positions evaluate token i at round((i+1)(L+1)/(M+1)) - 1, not at i:
    offset 0 is the model's own encoding, and offset k moves each of those positions by k."""
    from types import SimpleNamespace

    from onmt_posenc.model.positions.randomized import RandomizedSinusoidalEncoding

    module = RandomizedSinusoidalEncoding(16, "SinusoidalInterleaved", max_position=256, eval_length=25).eval()
    embeddings = SimpleNamespace(make_embedding=SimpleNamespace(pe=module))
    loaded = SimpleNamespace(model=SimpleNamespace(encoder=SimpleNamespace(embeddings=embeddings)),
                             opt=SimpleNamespace(position_encoding_type="SinusoidalInterleaved"))
    emb = torch.randn(2, 6, 16)
    with torch.no_grad():
        assert torch.equal(shift_invariance.offset_encoding(loaded, 0)(emb), module(emb))
        own = module.evaluation_positions(0, 6, emb.device)
        assert own.tolist() == [9, 19, 29, 39, 48, 58]
        moved = module.embed_at_real(emb, (own + 100).float())
        assert torch.equal(shift_invariance.offset_encoding(loaded, 100)(emb), moved)


def test_swapped_command_on_a_model_without_separators_measures_by_alignment(trained):
    """The tiny test model was never trained on joined sentences: its translations carry no
    <sep>, so X1's translation cannot be found by the separators. The command says so, with
    the share of lines, and finds it by alignment instead: a drop, not "not applicable"."""
    src_lines, tgt_lines = read_lines(trained["src"]), read_lines(trained["tgt"])
    src, tgt = trained["dir"] / "pairs.src", trained["dir"] / "pairs.tgt"
    write_lines(src, join_lines(src_lines, 2, "<sep>"))
    write_lines(tgt, join_lines(tgt_lines, 2, "<sep>"))
    out = trained["dir"] / "swapped2"
    result = run([command("onmt-posenc"), "swapped", "--model", trained["ape"], "--src", src, "--tgt", tgt,
                  "--workdir", out, "--translate-config", trained["translate_config"], "--json", out / "result.json"])
    stored = json.loads((out / "result.json").read_text())
    share = swapped.wrong_separator_share(read_lines(out / "original.hyp"), read_lines(tgt))
    assert share > swapped.WRONG_SEPARATORS_AT_MOST
    assert not stored["applicable"] and stored["wrong_separators"] == share and "drop" not in stored
    assert stored["why"] == swapped.separators_why(share) and stored["why"] in result.stdout
    assert stored["why"].startswith(f"not applicable: {share:.0%} of the model's Original translations have another "
                                    "number of separators than the reference")
    # The scores follow from the command's own translations, whatever their quality on this CPU
    # (a tiny model's BLEU may be 0): X1 by alignment, the segment of each Original translation
    # aligned to Y1 and of each Swapped translation aligned to it at the end, scored against Y1
    aligned, first_refs = stored["aligned"], [line.split(" <sep> ")[0] for line in read_lines(tgt)]
    for name, last in (("original", False), ("swapped", True)):
        found = swapped.aligned_first_sentences(read_lines(out / f"{name}.hyp"), read_lines(tgt), last=last)
        assert corpus_bleu(found, first_refs).score == pytest.approx(aligned[name])
    assert aligned["drop"] == pytest.approx(aligned["original"] - aligned["swapped"])
    assert f"found by alignment: Original {aligned['original']:.2f}, Swapped {aligned['swapped']:.2f}" in result.stdout


def test_joined_lines_command_says_separators_length_and_where_x1_lands(tmp_path):
    """Made-up translations of real lines joined 3 per line: one right, one that moves X1 to the
    end and drops every separator, one that stops after X1."""
    refs = join_lines(read_lines(TOY_ENDE / "tgt-test.txt")[:9], 3, "<sep>")
    srcs = join_lines(read_lines(TOY_ENDE / "src-test.txt")[:9], 3, "<sep>")
    y = [line.split(" <sep> ") for line in refs]
    hyps = [refs[0], " ".join(y[1][1:] + y[1][:1]), y[2][0]]
    paths = {name: tmp_path / name for name in ("src", "ref", "hyp")}
    for name, lines in (("src", srcs), ("ref", refs), ("hyp", hyps)):
        write_lines(paths[name], lines)
    result = run([command("onmt-posenc"), "joined-lines", "--src", paths["src"], "--ref", paths["ref"],
                  "--hyp", paths["hyp"], "--lines", "2", "--markdown", tmp_path / "sample.md",
                  "--json", tmp_path / "sample.json"])
    stored = json.loads((tmp_path / "sample.json").read_text())
    right, moved, stopped = stored["lines"]
    assert [line["hypothesis_separators"] for line in stored["lines"]] == [2, 0, 0]
    assert right["reference_separators"] == 2 and right["best_segment"] == 1 and right["best_chrf"] == 100
    assert right["length_ratio"] == pytest.approx(1) and right["aligned_chrf"] == pytest.approx(100)
    # no separators: one segment; by alignment, X1's words are found at the end, not the start
    assert moved["best_segment"] == 1 and moved["aligned_chrf"] < 50
    assert stopped["length_ratio"] < 0.6 and stopped["aligned_chrf"] == pytest.approx(100)
    assert stored["summary"]["right_separators"] == 1
    assert (tmp_path / "sample.md").read_text() == result.stdout
    assert "**Line 2.**" in result.stdout and "**Line 3.**" not in result.stdout


def test_swapped_scores_the_first_sentence_where_it_stands_and_at_the_end(trained):
    """X1's translation is the first segment of the Original and the last of the Swapped."""
    assert swapped.swap_first_to_end("a b <sep> c <sep> d e") == "c <sep> d e <sep> a b"
    refs = join_lines(read_lines(trained["tgt"]), 2, "<sep>")
    # A perfect "model" (the references themselves) keeps X1 intact in both orders.
    scores = swapped.first_sentence_scores(refs, [swapped.swap_first_to_end(t) for t in refs], refs)
    assert scores["original"] == pytest.approx(100) and scores["swapped"] == pytest.approx(100)
    assert scores["aligned"] == pytest.approx({"original": 100, "swapped": 100, "drop": 0})
    # One that loses X1's last word once it stands at the end
    moved = [" ".join(swapped.swap_first_to_end(t).split()[:-1]) for t in refs]
    scores = swapped.first_sentence_scores(refs, moved, refs)
    first_refs = [t.split(" <sep> ")[0] for t in refs]
    expected = corpus_bleu([" ".join(r.split()[:-1]) for r in first_refs], first_refs).score
    assert scores["swapped"] == pytest.approx(expected) and scores["drop"] == pytest.approx(100 - expected)
    assert scores["applicable"] and scores["wrong_separators"] == 0
    # One that loses a separator once X1 stands at the end: its last segment is not X1's
    def last_separator_lost(line):
        tokens = line.split()
        del tokens[len(tokens) - 1 - tokens[::-1].index("<sep>")]
        return " ".join(tokens)

    merged = [last_separator_lost(swapped.swap_first_to_end(r)) for r in refs]  # two sentences: none left
    scores = swapped.first_sentence_scores(refs, merged, refs)
    assert not scores["applicable"] and "drop" not in scores
    assert scores["wrong_separators"] == 0 and scores["wrong_separators_swapped"] == 1
    assert scores["why"].startswith("not applicable: 100% of the model's Swapped translations have another number")
    assert scores["aligned"]["drop"] == pytest.approx(0, abs=1e-6)  # the words are all there, in their place


def test_length_buckets_command(trained):
    hyps = {name: trained["dir"] / f"{name}.hyp" for name in ("ape", "shape")}
    out = trained["dir"] / "buckets"
    run([command("onmt-posenc"), "length-buckets", "--src", trained["src"], "--ref", trained["tgt"],
         "--hyp", f"ape={hyps['ape']}", "--hyp", f"shape={hyps['shape']}", "--baseline", "ape",
         "--train-src", trained["train_src"], "--plot", f"{out}.png", "--json", f"{out}.json"])
    result = json.loads(open(f"{out}.json").read())
    lengths = [len(line.split()) for line in read_lines(trained["src"])]
    assert sum(result["counts"]) == len(lengths)
    assert result["max_train_length"] == max(len(line.split()) for line in read_lines(trained["train_src"]))
    assert len(result["bleu"]["shape"]) == len(result["buckets"]) == len(result["gain"]["shape"])
    assert result["gain"]["shape"] == pytest.approx([s - a for s, a in zip(result["bleu"]["shape"],
                                                                          result["bleu"]["ape"])])
    assert len(result["length_ratio"]["ape"]) == len(result["buckets"])
    assert open(f"{out}.png", "rb").read(8) == PNG_MAGIC


def test_length_buckets_marks_unseen_lengths():
    src = ["a " * n for n in (3, 12, 25, 25)]
    refs = ["x y z w"] * 4
    hyps = {"m": refs, "b": ["q"] * 2 + ["x y z w x y z w"] * 2}
    result = length_buckets.compare({label: length_buckets.bucket_scores(src, refs, lines, width=10, max_train_length=15)
                                     for label, lines in hyps.items()}, baseline="b")
    # one bucket ends at the longest training source: none mixes seen and unseen lengths
    assert result["buckets"] == ["1-5", "6-15", "16-25"]
    assert result["counts"] == [1, 1, 2]
    assert result["unseen"] == [False, False, True]
    assert result["bleu"]["m"] == pytest.approx([100, 100, 100])
    assert all(g > 0 for g in result["gain"]["m"])
    # hypothesis / reference length per bucket: "q" stops early, the doubled line runs on
    assert result["length_ratio"]["m"] == [1, 1, 1] and result["length_ratio"]["b"] == [0.25, 0.25, 2]


def test_length_buckets_score_each_bucket_and_pool_its_token_nlls():
    src = ["a " * n for n in (3, 12, 25, 25)]
    refs = ["x y z w"] * 4
    nlls = [[1.0, 3.0], None, [2.0], [4.0, 4.0, 4.0]]  # per sentence; None: not scored (an empty source)
    result = length_buckets.bucket_scores(src, refs, ["q"] * 2 + ["x y z w x y z w"] * 2, width=10,
                                          max_train_length=15, nlls=nlls)
    # the mean over the bucket's gold tokens, not over its sentences' means
    assert result["nll"] == [2.0, None, 3.5] and result["nll_all"] == pytest.approx(18 / 6)
    # "q" stops early: the brevity penalty says so; the doubled line is not penalised
    assert result["brevity_penalty"][0] < 0.1 and result["brevity_penalty"][2] == 1
    # clipped counts: the doubled line matches each reference word once of its two
    assert [len(p) for p in result["precisions"]] == [4, 4, 4] and result["precisions"][2][0] == 50
    assert result["chrf"][0] < result["chrf"][2]
    assert length_buckets.mean_token_nll([None]) is None
    # the lengths seen in training (<= 15) and the longer ones, each scored as one corpus
    split = result["split"]
    assert split["at"] == 15 and (split["up_to"]["count"], split["beyond"]["count"]) == (2, 2)
    assert split["up_to"]["nll"] == 2.0 and split["beyond"]["nll"] == 3.5
    assert split["beyond"]["length_ratio"] == 2 and split["beyond"]["precisions"][0] == 50
    assert "split" not in length_buckets.bucket_scores(src, refs, refs, width=10)
    assert list(length_buckets.bucket_scores(src, refs, refs, width=10, max_train_length=30)["split"]) == ["at", "up_to"]
    # a run trained on every length (a size-matched control), split where the capped runs are:
    # the same buckets, none of them unseen
    control = length_buckets.bucket_scores(src, refs, refs, width=10, max_train_length=30, split_at=15)
    assert control["buckets"] == result["buckets"] and not any(control["unseen"])
    assert control["split"]["beyond"]["count"] == 2


def test_relative_length_buckets_end_at_multiples_of_the_longest_training_source(tmp_path):
    """relative [1, 1.5, 2] of a longest training source of 10: buckets 1-10, 11-15, 16-20 and one
    beyond 2x up to the longest source (27), named by their multiples; split at 10 (1x), the
    buckets past it unseen; a multiple within the same token as the previous one makes no bucket."""
    src = ["a " * n for n in (4, 10, 11, 15, 16, 20, 21, 27)]
    refs = ["x y z w"] * 8
    hyps = refs[:4] + ["x y"] * 4  # stops early past 1.5x
    result = length_buckets.bucket_scores(src, refs, hyps, max_train_length=10, nlls=[[1.0]] * 4 + [[3.0]] * 4,
                                          relative=[1, 1.5, 2])
    assert result["buckets"] == ["1-10", "11-15", "16-20", "21-27"]
    assert result["multiples"] == ["0-1x", "1-1.5x", "1.5-2x", ">2x"]
    assert result["counts"] == [2, 2, 2, 2] and result["unseen"] == [False, True, True, True]
    assert result["length_ratio"] == [1, 1, 0.5, 0.5] and result["nll"] == [1.0, 1.0, 3.0, 3.0]
    assert result["split"]["at"] == 10 and result["split"]["beyond"]["count"] == 6
    assert length_buckets.relative_edges([30], [1, 1.05, 2], 10) == [(1, 10, "0-1x"), (11, 20, "1-2x"),
                                                                     (21, 30, ">2x")]
    assert length_buckets.bucket_names(result)[1] == "1-1.5x: 11-15"
    with pytest.raises(ValueError, match="1 among their multiples"):
        length_buckets.bucket_scores(src, refs, hyps, max_train_length=10, relative=[1.5, 2])
    # the plot against multiples of the longest training source, 1x marked, from one seed
    path = length_buckets.plot_seeds({"ape": [result]}, tmp_path / "relative.png", "relative")
    assert open(path, "rb").read(8) == PNG_MAGIC


def test_length_plot_over_seeds_draws_a_band_per_method(tmp_path):
    src = ["a " * n for n in (3, 12, 25, 25)]
    refs = ["x y z w"] * 4
    seeds = {label: [length_buckets.bucket_scores(src, refs, hyps, width=10, max_train_length=15)
                     for hyps in (refs, ["x y"] * 4)] for label in ("ape", "rpe")}
    path = length_buckets.plot_seeds(seeds, tmp_path / "seeds.png", "two seeds")
    assert open(path, "rb").read(8) == PNG_MAGIC
    other = length_buckets.bucket_scores(["a"] * 4, refs, refs, width=10)
    with pytest.raises(ValueError, match="rpe was bucketed on other source sentences"):
        length_buckets.plot_seeds({"ape": seeds["ape"], "rpe": [other]}, tmp_path / "bad.png", "bad")


def test_token_nll_command_and_comparison(trained):
    out = trained["dir"] / "tokens"
    run([command("onmt-posenc"), "token-nll", "--model-a", trained["shape"], "--model-b", trained["ape"],
         "--labels", "shape", "ape", "--src", trained["src"], "--tgt", trained["tgt"],
         "--train-tgt", trained["train_tgt"], "--plot", f"{out}.png", "--json", f"{out}.json"])
    result = json.loads(open(f"{out}.json").read())
    tgt = models.read_token_lines(trained["tgt"])
    assert result["tokens"] == sum(len(t) + 1 for t in tgt)
    assert sum(map(sum, result["counts"])) == result["tokens"]
    assert 0 < result["share"] < 1
    assert open(f"{out}.png", "rb").read(8) == PNG_MAGIC
    # A model never beats itself; ties are not wins.
    nll = token_nll.token_nlls(models.load_model(trained["ape"]), models.read_token_lines(trained["src"]), tgt)
    counts = token_nll.training_frequencies(trained["train_tgt"])
    assert token_nll.compare(nll, nll, token_nll.gold_frequencies(tgt, counts))["share"] == 0


@pytest.mark.parametrize("bins", [2, 4, 100000])
def test_frequency_buckets_are_ranges_that_hold_tokens(bins):
    """More bins than frequencies: buckets merge instead of coming out empty or reversed
    (100,000 bins gave a last bucket '213-212')."""
    frequencies = [[1, 1, 1, 5, 5, 212], [212, 212, 40, 1]]
    nll_a = [[0.5] * 6, [0.1] * 4]
    nll_b = [[0.4] * 6, [0.2] * 4]
    result = token_nll.compare(nll_a, nll_b, frequencies, frequency_bins=bins)
    ranges = [tuple(map(int, label.split("-"))) for label in result["frequency_buckets"]]
    assert all(low <= high for low, high in ranges) and ranges[-1][1] == 212
    assert all(sum(column) > 0 for column in zip(*result["counts"]))
    assert result["share"] == 4 / 10


def test_text_the_model_cannot_read_is_warned_about(trained, tmp_path):
    """Japanese text given to a model of English and German: the analyses would measure <unk>s."""
    japanese = head(TOY_ENDE.parent / "small_parallel_enja" / "test.ja", tmp_path / "test.ja", 10)
    result = run([command("onmt-posenc"), "shift-invariance", "--model", trained["ape"], "--src", japanese,
                  "--max-sentences", "10"])
    share = re.search(r"onmt-posenc shift-invariance: warning: (\d+)% of the tokens of (.+) are not in the "
                      r"model's src vocabulary", result.stderr)
    assert share and int(share.group(1)) > 50 and share.group(2) == str(japanese), result.stderr


def test_speed_command(trained):
    out = trained["dir"] / "speed.json"
    run([command("onmt-posenc"), "speed", "--model", f"ape={trained['ape']}", "--model", f"shape={trained['shape']}",
         "--src", trained["src"], "--tgt", trained["tgt"], "--batches", "2", "--rounds", "2", "--json", out])
    result = json.loads(out.read_text())
    assert result["baseline"] == "ape"
    assert result["relative"]["shape"] == pytest.approx(
        result["tokens_per_second"]["shape"] / result["tokens_per_second"]["ape"])
    assert all(v > 0 for v in result["tokens_per_second"].values())


def test_speed_refuses_models_with_other_vocabularies(trained):
    ape = models.load_model(trained["ape"])
    other = ape._replace(vocabs=dict(ape.vocabs, src=ape.vocabs["tgt"]))
    with pytest.raises(ValueError, match="other vocabularies"):
        speed.throughput({"a": ape, "b": other}, models.read_token_lines(trained["src"]),
                         models.read_token_lines(trained["tgt"]), batches=1, rounds=1)


def test_position_ablation_command(trained):
    out = trained["dir"] / "ablation"
    run([command("onmt-posenc"), "position-ablation", "--model", trained["ape"], "--src", trained["src"],
         "--tgt", trained["tgt"], "--sinusoid-plot", f"{out}.png", "--json", f"{out}.json"])
    result = json.loads(open(f"{out}.json").read())
    assert result["removed_from"] == ["src", "tgt"]
    assert result["encoder_cosine"] < 0.999 and result["decoder_cosine"] < 0.999
    # Without its positions the model scores the gold translations otherwise (whether worse is a
    # matter of training, which a model of a few updates does not decide)
    assert result["perplexity_removed"] != pytest.approx(result["perplexity_kept"], rel=1e-4)
    assert open(f"{out}.png", "rb").read(8) == PNG_MAGIC
    # seed 003's conditions: each side alone, the decoder with the decaying mask, both
    conditions = result["conditions"]
    assert list(conditions) == ["encoder", "decoder", "decoder+decay", "both"]
    assert conditions["encoder"]["encoder_cosine"] < 0.999 and conditions["decoder"]["encoder_cosine"] == 1.0
    assert conditions["decoder+decay"]["decoder_cosine"] != conditions["decoder"]["decoder_cosine"]
    assert conditions["both"]["perplexity"] == result["perplexity_removed"]
    # the slides' yardstick: N(0, I) vectors in d = 64 have cosine 0 on average, spread 1/sqrt(64)
    sticks = result["yardsticks"]
    assert abs(sticks["random_mean"]) < 0.01 and sticks["random_std"] == pytest.approx(64**-0.5, rel=0.05)
    assert -1 <= sticks["decoder_other_token"] < 1
    printed = run([command("onmt-posenc"), "position-ablation", "--model", trained["ape"], "--src", trained["src"],
                   "--tgt", trained["tgt"]]).stdout
    assert "decoder+decay" in printed and "cosine of N(0, I) vectors in 64 dimensions" in printed


def test_ablation_leaves_the_model_as_it_was(trained):
    loaded = models.load_model(trained["shape"])
    before = [models.position_module(loaded.model, side) for side in ("src", "tgt")]
    attentions = [layer.self_attn for layer in loaded.model.decoder.transformer_layers]
    position_ablation.ablate(loaded, models.read_token_lines(trained["src"], 3), models.read_token_lines(trained["tgt"], 3))
    assert [models.position_module(loaded.model, side) for side in ("src", "tgt")] == before
    assert [layer.self_attn for layer in loaded.model.decoder.transformer_layers] == attentions


def test_swapped_training_examples_are_the_joined_lines_of_the_corpus_as_trained_on(tmp_path):
    """From the runner's sample/ (tokenized, BPE with joiner marks): the joined examples
    only, the first N, references detokenized sentence by sentence around the separators."""
    src, tgt = tmp_path / "train.sample.src", tmp_path / "train.sample.tgt"
    write_lines(src, ["a single one", "x1 <sep> x2", "y1 <sep> y2", "z1 <sep> z2"])
    write_lines(tgt, ["ein ￭zelner", "Ei￭ ne Katze <sep> Hallo ￭!", "b1 <sep> b2", "c1 <sep> c2"])
    out_src, out_ref = swapped.training_examples(src, tgt, 2, tmp_path / "out")
    assert read_lines(out_src) == ["x1 <sep> x2", "y1 <sep> y2"]
    assert read_lines(out_ref) == ["Eine Katze <sep> Hallo!", "b1 <sep> b2"]
    write_lines(tgt, ["a", "b", "c", "d"])
    assert swapped.training_examples(src, tgt, 2, tmp_path / "none") is None


def test_length_bucket_plot_of_a_baseline_alone_has_no_empty_gain_panel(tmp_path):
    """A batch where only the baseline has finished: BLEU and length panels, no gain panel
    (an empty one made matplotlib warn "No artists with labels" in the report)."""
    import warnings

    src, refs = ["a b c", "a b c d e f g h i j k l"], ["x y", "x y z"]
    result = length_buckets.compare({"ape": length_buckets.bucket_scores(src, refs, refs, width=5)}, baseline="ape")
    assert result["gain"] == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = length_buckets.plot(result, tmp_path / "alone.png", "alone")
    assert open(path, "rb").read(8) == PNG_MAGIC


def test_length_penalty_command_chooses_on_valid_and_scores_test(trained):
    """Each penalty decoded and scored as onmt_translate with it would be; the choice is the
    best validation BLEU."""
    work = trained["dir"] / "penalties"
    result = run([command("onmt-posenc"), "length-penalty", "--model", trained["ape"],
                  "--valid-src", trained["src"], "--valid-ref", trained["tgt"], "--test-src", trained["src"],
                  "--test-ref", trained["tgt"], "--penalties", "none", "wu:1.0", "--sentences", "20",
                  "--beam-size", "2", "--max-length", "40", "--workdir", work, "--json", work / "result.json"])
    stored = json.loads((work / "result.json").read_text())
    assert list(stored["penalties"]) == ["none", "wu:1"]
    best = max(stored["penalties"], key=lambda name: stored["penalties"][name]["valid"]["bleu"])
    assert stored["chosen_on_valid"] == best and f"{best:<16}" in result.stdout and "<- chosen on valid" in result.stdout
    assert "[1/4] length penalty none: translate valid" in result.stderr  # progress, one line a decode
    assert "[4/4] length penalty wu:1: translate test" in result.stderr
    # wu:1 is onmt_translate's own -length_penalty wu -alpha 1: the same translation
    direct = trained["dir"] / "wu1.hyp"
    run([command("onmt_translate"), "-model", trained["ape"], "-src", work / "valid.first20.src", "-output", direct,
         "-beam_size", "2", "-max_length", "40", "-length_penalty", "wu", "-alpha", "1.0"])
    assert read_lines(direct) == read_lines(work / "valid.wu:1.hyp")
    scores = stored["penalties"]["wu:1"]["test"]
    assert scores["bleu"] == pytest.approx(corpus_bleu(read_lines(direct), read_lines(trained["tgt"])[:20]).score)
    bad = run([command("onmt-posenc"), "length-penalty", "--model", trained["ape"], "--valid-src", trained["src"],
               "--valid-ref", trained["tgt"], "--test-src", trained["src"], "--test-ref", trained["tgt"],
               "--penalties", "wu", "--workdir", work], expect_ok=False)
    assert bad.returncode == 2 and "expects none, avg or wu:ALPHA (e.g. wu:0.6), got 'wu'" in bad.stderr
