"""WMT16 preparation (every step after the download) and the data-setting recipes, on real
Multi30k and toy-ende text standing in for the WMT16 files."""
import math
import shutil
import tarfile

import onmt  # noqa: F401  (activates the extension in this process too)
import pyonmttok
import pytest
from conftest import MULTI30K, REPO, TOY_ENDE, command, run
from onmt import opts as onmt_opts
from onmt.constants import CorpusTask
from onmt.inputters.dynamic_iterator import build_dynamic_dataset_iter
from onmt.inputters.inputter import build_vocab
from onmt.transforms import get_specials, get_transforms_cls
from onmt.utils.parse import ArgumentParser

from onmt_posenc.config.include import merged_mapping
from onmt_posenc.core.text import opennmt_tokens, read_lines, write_lines
from onmt_posenc.core.joining import split_segments
from onmt_posenc.data.prepare_wmt16 import DEV_YEARS, TRAIN_CORPORA, YEARS, write_training_text


DATA = "data/wmt16_en_de"
TINY = ["-world_size", "1", "-gpu_ranks", "-model_dtype", "fp32", "-num_workers", "0", "-enc_layers", "1",
        "-dec_layers", "1", "-heads", "2", "-hidden_size", "32", "-word_vec_size", "32", "-transformer_ff", "64",
        "-batch_size", "2048", "-accum_count", "1", "-bucket_size", "256", "-warmup_steps", "10",
        "-train_steps", "2", "-valid_steps", "2", "-save_checkpoint_steps", "2", "-report_every", "1"]


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """The layout `prepare-wmt16 download` writes. Training text: 3,000 Multi30k pairs, then
    toy-ende pairs of up to 125 tokens and one with an empty source, for the cleaning rule."""
    raw = tmp_path_factory.mktemp("raw")
    for lang, toy in (("en", "src"), ("de", "tgt")):
        lines = read_lines(MULTI30K / f"train.{lang}")[:3000]
        lines += read_lines(TOY_ENDE / f"{toy}-train.txt")[:8] + read_lines(TOY_ENDE / f"{toy}-val.txt")[:300]
        write_lines(raw / f"train.{lang}", lines)
        val, test = read_lines(MULTI30K / f"val.{lang}"), read_lines(MULTI30K / f"test_2016_flickr.{lang}")
        for i, year in enumerate(DEV_YEARS):
            write_lines(raw / f"newstest{year}.{lang}", val[i * 45:(i + 1) * 45])
        for i, year in enumerate(y for y in YEARS if y not in DEV_YEARS):
            write_lines(raw / f"newstest{year}.{lang}", test[i * 53:(i + 1) * 53])
    return raw


@pytest.fixture(scope="module")
def site(tmp_path_factory, raw):
    """A working directory laid out as the recipes expect, built by the real command."""
    site = tmp_path_factory.mktemp("site")
    run([command("onmt-posenc"), "prepare-wmt16", "build", raw, site / DATA, "--merges", "1000", "--threads", "2"])
    return site


def kept_by_clean_corpus(raw):
    """Pairs that Moses' clean-corpus-n.perl 1 80 keeps, counted in pyonmttok tokens."""
    plain = pyonmttok.Tokenizer("conservative", joiner_annotate=True)
    pairs = zip(read_lines(raw / "train.en"), read_lines(raw / "train.de"))
    kept = []
    for en, de in pairs:
        n_en, n_de = len(plain.tokenize(en)[0]), len(plain.tokenize(de)[0])
        if 1 <= n_en <= 80 and 1 <= n_de <= 80 and n_en <= 9 * n_de and n_de <= 9 * n_en:
            kept.append((en, de))
    return kept


def test_training_pairs_cleaned_and_split_into_joint_bpe(raw, site):
    kept = kept_by_clean_corpus(raw)
    assert 3000 < len(kept) < 3308  # some pairs of the real data fall outside 1..80 tokens
    detok = pyonmttok.Tokenizer("conservative", joiner_annotate=True)
    for side, lang in enumerate(("en", "de")):
        lines = read_lines(site / DATA / f"train.bpe.{lang}")
        assert [detok.detokenize(line.split()) for line in lines] == [" ".join(p[side].split()) for p in kept]
    tokens = {t for line in read_lines(site / DATA / "train.bpe.de") for t in line.split()}
    assert any(t.endswith("￭") for t in tokens)  # words split into subwords
    assert len(read_lines(site / DATA / "bpe.codes")) == 1 + 1000  # version line + the merges


def test_dev_and_test_sets_of_every_data_setting(raw, site):
    out = site / DATA
    for year in YEARS:
        assert read_lines(out / f"newstest{year}.de") == read_lines(raw / f"newstest{year}.de")
        sentences = read_lines(out / f"newstest{year}.bpe.en")
        joined = read_lines(out / f"newstest{year}.interp.bpe.en")
        assert len(joined) == math.ceil(len(sentences) / 10)
        assert [" ".join(s) for line in joined for s in split_segments(line.split(), "<sep>")] == sentences
        references = [s for line in read_lines(out / f"newstest{year}.interp.de")
                      for s in split_segments(line.split(), "<sep>")]
        assert references == [line.split() for line in read_lines(raw / f"newstest{year}.de")]
    for lang in ("en", "de"):
        per_year = [read_lines(out / f"newstest{year}.bpe.{lang}") for year in DEV_YEARS]
        assert read_lines(out / f"valid.bpe.{lang}") == sum(per_year, [])
        # joined per year: 45 lines give 5 lines each, no line mixes two years
        assert len(read_lines(out / f"valid.interp.bpe.{lang}")) == 4 * 5


def test_recipes_name_the_files_that_build_writes(site):
    named = set()
    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        for corpus in merged_mapping(recipe).get("data", {}).values():
            named.update(corpus[key] for key in ("path_src", "path_tgt") if corpus.get(key, "").startswith(DATA))
    assert {f"{DATA}/train.bpe.en", f"{DATA}/valid.bpe.en", f"{DATA}/valid.interp.bpe.de"} <= named
    assert [path for path in sorted(named) if not (site / path).is_file()] == []


def test_interpolate_recipe_trains_translates_and_scores(site):
    """VANILLA vocabulary, then SHAPE on INTERPOLATE (tiny, CPU), a joined test set
    translated, split back and scored."""
    run([command("onmt_build_vocab"), "-config", REPO / "recipes/ape.yaml", "-n_sample", "-1"], cwd=site)
    run([command("onmt_train"), "-config", REPO / "recipes/shape_interpolate.yaml", *TINY], cwd=site)
    model = site / "runs/shape_interpolate/model_step_2.pt"
    source = site / DATA / "newstest2014.interp.bpe.en"
    hyp = site / "newstest2014.interp.hyp"
    run([command("onmt_translate"), "-model", model, "-src", source, "-output", hyp, "-beam_size", "1",
         "-max_length", "12"], cwd=site)
    result = run([command("onmt-posenc"), "evaluate", "--hyp", hyp, "--ref", site / DATA / "newstest2014.interp.de"])
    assert result.stdout.startswith("BLEU = ") and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in result.stdout
    # the joined reference holds 53 sentences in 6 lines; the 12-token translations cannot
    assert "split into 53 sentences" in result.stdout and "6 of 6 lines had a wrong number of separators" in result.stdout
    split = site / "newstest2014.hyp"
    run([command("onmt-posenc"), "interpolate", "split", "--source", source, hyp, split])
    assert len(read_lines(split)) == 53


@pytest.fixture(scope="module")
def extrapolate_site(tmp_path_factory):
    """Long real pairs (toy-ende dev, up to 125 tokens) as the training data of the recipe."""
    site = tmp_path_factory.mktemp("extrapolate")
    (site / DATA).mkdir(parents=True)
    for lang, toy in (("en", "src"), ("de", "tgt")):
        lines = read_lines(TOY_ENDE / f"{toy}-val.txt")
        write_lines(site / DATA / f"train.bpe.{lang}", lines[:1000])
        write_lines(site / DATA / f"valid.bpe.{lang}", read_lines(TOY_ENDE / f"{toy}-test.txt")[:200])
    run([command("onmt_build_vocab"), "-config", REPO / "recipes/ape_extrapolate.yaml", "-n_sample", "-1",
         "-dump_samples", "-num_threads", "1"], cwd=site)
    return site


def test_extrapolate_keeps_exactly_the_pairs_of_at_most_50_subwords(extrapolate_site):
    data = extrapolate_site / DATA
    # as OpenNMT-py reads the lines (the prepared data has single spaces: one token, one subword)
    pairs = [(" ".join(opennmt_tokens(en)), " ".join(opennmt_tokens(de)))
             for en, de in zip(read_lines(data / "train.bpe.en"), read_lines(data / "train.bpe.de"))]
    lengths = [(len(en.split(" ")), len(de.split(" "))) for en, de in pairs]
    # the boundary cases are there: a side of exactly 50 kept, of exactly 51 dropped
    assert (38, 50) in lengths and (50, 37) in lengths and (42, 51) in lengths and (51, 45) in lengths
    expected = [pair for pair, (n_en, n_de) in zip(pairs, lengths) if n_en <= 50 and n_de <= 50]
    dumped = list(zip(read_lines(data / "sample/wmt16.sample.src"), read_lines(data / "sample/wmt16.sample.tgt")))
    assert len(expected) < len(pairs)
    assert dumped == expected


def test_extrapolate_leaves_the_dev_set_whole(extrapolate_site, monkeypatch):
    monkeypatch.chdir(extrapolate_site)
    parser = ArgumentParser()
    onmt_opts.train_opts(parser)
    opt = parser.parse_args(["-config", str(REPO / "recipes/ape_extrapolate.yaml"), "-num_workers", "0"])
    ArgumentParser.validate_prepare_opts(opt)
    transforms_cls = get_transforms_cls(opt._all_transform)
    vocabs = build_vocab(opt, get_specials(opt, transforms_cls))
    batches = build_dynamic_dataset_iter(opt, transforms_cls, vocabs, task=CorpusTask.VALID)
    lengths = sorted(length for batch, _ in batches for length in batch["srclen"].tolist())
    valid = read_lines(extrapolate_site / DATA / "valid.bpe.en")
    assert max(lengths) > 50
    assert lengths == sorted(len(opennmt_tokens(line)) for line in valid)


def test_download_concatenates_the_three_corpora(tmp_path):
    """The archive step of `download`, on local archives with statmt.org's member names."""
    members = ("europarl-v7.de-en", "commoncrawl.de-en", "training-parallel-nc-v11/news-commentary-v11.de-en")
    archives, expected = [], {"en": b"", "de": b""}
    for i, ((url, stem), member) in enumerate(zip(TRAIN_CORPORA, members)):
        archive = tmp_path / url.rsplit("/", 1)[1]
        with tarfile.open(archive, "w:gz") as tar:
            for lang, toy in (("en", "src"), ("de", "tgt")):
                text = "\n".join(read_lines(TOY_ENDE / f"{toy}-test.txt")[i * 5:(i + 1) * 5]).encode()
                if i != 1:  # the second corpus lacks its final newline
                    text += b"\n"
                expected[lang] += text if text.endswith(b"\n") else text + b"\n"
                (tmp_path / "member").write_bytes(text)
                tar.add(tmp_path / "member", arcname=f"{member}.{lang}")
        archives.append((archive, stem))
    write_training_text(archives, tmp_path)
    for lang in ("en", "de"):
        assert (tmp_path / f"train.{lang}").read_bytes() == expected[lang]
        assert len(read_lines(tmp_path / f"train.{lang}")) == 15


@pytest.mark.parametrize("name, damage, message", [
    ("train.en", lambda p: p.write_bytes(p.read_bytes().replace(b"a", "\xe9".encode("latin-1"), 1)),
     "{path}:1: not UTF-8 text"),
    # the BPE tokenizer would drop the byte without a word
    ("newstest2014.en", lambda p: p.write_bytes(p.read_bytes().replace(b"a", "\xe9".encode("latin-1"), 1)),
     "{path}:1: not UTF-8 text"),
    ("train.de", lambda p: p.write_bytes(b""), "{path} is empty"),
])
def test_build_names_a_raw_file_it_cannot_use_before_writing(raw, tmp_path, name, damage, message):
    copy = tmp_path / "raw"
    shutil.copytree(raw, copy)
    damage(copy / name)
    result = run([command("onmt-posenc"), "prepare-wmt16", "build", copy, tmp_path / "out"], expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"onmt-posenc prepare-wmt16: error: {message.format(path=copy / name)}" in result.stderr
    assert not (tmp_path / "out").exists()
    missing = run([command("onmt-posenc"), "prepare-wmt16", "build", tmp_path / "nothing", tmp_path / "out"],
                  expect_ok=False)
    assert f"error: {tmp_path / 'nothing'} is not a folder" in missing.stderr
