"""Raw corpora with any whitespace through the stock commands: tokens are what
whitespace separates (str.split), in the vocabulary, in training and in translation."""
import re
from pathlib import Path

import onmt  # noqa: F401  (activates the extension)
from conftest import command, run, tiny_transformer, write_yaml
from onmt.inputters.text_corpus import ParallelCorpus, ParallelCorpusIterator
from onmt.transforms import TransformPipe

from onmt_posenc.data.transforms.adjacent_lines import CorpusLines
from onmt_posenc.data.transforms.phrase_boundaries import PhraseFile

# Double spaces, leading and trailing spaces, a tab, a thin space (U+2009) and
# no-break spaces (U+00A0) inside what OpenNMT-py alone would read as one token;
# a pair of lines holding only whitespace.
SRC = ["  das ist  Nummer\xa05 ", "ein\tHaus ist\u2009gut", "das Haus  ist Nummer\xa07", "gut ist  gut  ", "\xa0 "]
TGT = ["this is  number\xa05", " a house\tis good ", "the  house is number\xa07 ", "good  is good", " "]


def write_lines(path, lines):
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_messy_whitespace_builds_vocab_trains_and_translates(tmp_path):
    src = write_lines(tmp_path / "raw.src", SRC * 10)
    tgt = write_lines(tmp_path / "raw.tgt", TGT * 10)
    corpus = {"path_src": src, "path_tgt": tgt}
    config = write_yaml(
        tmp_path / "raw.yaml",
        tiny_transformer(tmp_path, train_steps=2, data={"corpus_1": corpus, "valid": corpus}),
    )
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"])
    for vocab, lines in ((tmp_path / "vocab.src", SRC), (tmp_path / "vocab.tgt", TGT)):
        tokens = [line.split("\t")[0] for line in vocab.read_text(encoding="utf-8").splitlines()]
        assert sorted(tokens) == sorted({token for line in lines for token in line.split()})

    run([command("onmt_train"), "-config", config])

    test_src = write_lines(tmp_path / "raw-test.src", [SRC[0]])
    output = tmp_path / "raw-test.hyp"
    result = run([command("onmt_translate"), "-model", tmp_path / "model_step_2.pt", "-src", test_src,
                  "-output", output, "-max_length", "5", "-verbose"])
    # -verbose logs the source as the model read it, each token looked up in its vocabulary.
    assert re.search(r"SENT 1: \['das', 'ist', 'Nummer', '5'\]", result.stdout + result.stderr)
    assert len(output.read_text(encoding="utf-8").splitlines()) == 1


def test_extension_reads_lines_as_the_corpus_reader(tmp_path):
    """concat_pairs and tgt_phrases re-read corpus lines by number and check them
    against the example; they must split them as OpenNMT-py's reader now does."""
    src, tgt = write_lines(tmp_path / "raw.src", SRC), write_lines(tmp_path / "raw.tgt", TGT)
    reader = ParallelCorpusIterator(ParallelCorpus("raw", src, tgt), TransformPipe.build_from([]))
    examples = [example for example, _, _ in reader]
    # A line without tokens stays one empty token, as OpenNMT-py reads an empty line.
    assert [example["src"] for example in examples] == [line.split() or [""] for line in SRC]
    assert [example["tgt"] for example in examples] == [line.split() or [""] for line in TGT]
    assert CorpusLines("raw", src, tgt, "<sep>").read(0, len(SRC)) == [
        [example[side] for example in examples] for side in ("src_original", "tgt_original")
    ]
    phrase_lines = [" ".join("0" * len(example["tgt"])) for example in examples]
    phrases = PhraseFile(write_lines(tmp_path / "raw.phrases", phrase_lines), tgt)
    for number, example in enumerate(examples):
        assert phrases.ids(number, example["tgt_original"], len(example["tgt"])) == [0] * len(example["tgt"])


def test_build_vocab_workers_flush_their_samples_before_returning(tmp_path):
    """onmt_build_vocab -dump_samples: a pool worker's examples travel to the writer
    process through a multiprocessing Queue; the pool terminates the worker once it has
    returned, so its Queue must have handed everything over by then (else the writer
    waits for ever for its "break"). Here in-process: after build_sub_vocab returns,
    the Queue's feeder thread (a private attribute) has ended, every example was read."""
    import multiprocessing

    from onmt.bin import build_vocab
    from onmt.constants import CorpusTask
    from onmt.inputters.text_corpus import get_corpora
    from onmt.transforms import get_transforms_cls, make_transforms
    from onmt.utils.parse import ArgumentParser

    lines = [f"w{i} w{i + 1} w{i + 2}" for i in range(500)]
    corpus = {"path_src": write_lines(tmp_path / "s.txt", lines), "path_tgt": write_lines(tmp_path / "t.txt", lines)}
    config = write_yaml(tmp_path / "vocab.yaml", {"data": {"corpus_1": corpus}, "save_data": str(tmp_path / "sample"),
                                                  "src_vocab": str(tmp_path / "vocab.src"), "share_vocab": True})
    opts = build_vocab._get_parser().parse_args(["-config", str(config), "-n_sample", "-1", "-dump_samples"])
    ArgumentParser.validate_prepare_opts(opts, build_vocab_only=True)
    transforms = make_transforms(opts, get_transforms_cls(opts._all_transform), None)
    queue = multiprocessing.Queue(opts.vocab_sample_queue_size)
    build_vocab.init_pool({"corpus_1": [queue]})
    # the writer: another process, as in onmt_build_vocab (closing the Queue closes this
    # process's end of the pipe, not the writer's)
    written = tmp_path / "written.txt"
    writer = multiprocessing.Process(target=write_sources, args=(queue, written), daemon=True)
    writer.start()
    build_vocab.build_sub_vocab(get_corpora(opts, task=CorpusTask.TRAIN), transforms, opts, -1, 1, 0)
    assert not queue._thread.is_alive()  # nothing left in the feeder: terminating the worker loses nothing
    writer.join(timeout=30)
    assert written.read_text(encoding="utf-8").splitlines() == lines


def write_sources(queue, path):
    """onmt_build_vocab's writer process, for one corpus: the source of each example until "break"."""
    with open(path, "w", encoding="utf-8") as f:
        for _, src, _ in iter(queue.get, "break"):
            f.write(src + "\n")
