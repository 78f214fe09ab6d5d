"""A small synthetic translation task, generated offline, for the default demo.

Two artificial languages with a fixed lexicon and different word orders:

    source (SVO, adjective before noun):  NP VERB [NP] [PREP NP]       NP = DET [ADJ] NOUN
    target (SOV, adjective after noun):   NP' [NP'] [NP' PREP'] VERB'  NP' = DET' NOUN' [ADJ']

Every source word has exactly one target word (a random bijection per word
class), so a perfect translation exists and BLEU measures how well a model
finds *where* each word goes: the verb moves to the end of its sentence, each
adjective hops over its noun, prepositions become postpositions. All moves
depend on positions within a sentence, never on absolute positions.

An example is one or more sentences joined by `<sep>` on both sides, as in
the SHAPE paper's INTERPOLATE data. The sets mirror its EXTRAPOLATE setting:

    train, valid  1 .. max_sentences sentences, kept only if the source has
                  at most max_train_length tokens (as EXTRAPOLATE drops long pairs)
    test          1 .. test_sentences sentences, at most max_test_length
                  tokens (None: no limit): many examples are longer than any
                  training example
    concat        exactly concat_sentences sentences, at most max_test_length
                  tokens, for the swapped evaluation

Training examples hold a varying number of sentences, so "stop after n
sentences" is no shortcut: a model must notice that the source is used up.
Everything is a function of `seed`, so two machines write identical files.
"""
import itertools
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from onmt_posenc.core.joining import DEFAULT_SEP, join_segments

# Word classes and how many words each has.
CLASS_SIZES = {"det": 4, "adj": 16, "noun": 32, "verb": 16, "prep": 6}
EVAL_SETS = ("valid", "test", "concat")


@dataclass(frozen=True)
class SyntheticTask:
    seed: int = 1
    train_examples: int = 20000
    eval_examples: int = 400
    max_sentences: int = 6
    max_train_length: int = 24
    test_sentences: int = 10
    max_test_length: int = None
    concat_sentences: int = 2
    object_rate: float = 0.7
    adjective_rate: float = 0.4
    prepositional_rate: float = 0.3

    def __post_init__(self):
        for name, value in asdict(self).items():  # as YAML gives them: 1.5, "abc", [1], true
            if name.endswith("_rate"):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                    raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")
            elif (value is not None or name != "max_test_length") and (isinstance(value, bool)
                                                                       or not isinstance(value, int)):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if min(self.train_examples, self.eval_examples) < 1:
            raise ValueError("train_examples and eval_examples must be >= 1")
        if not 1 <= self.max_sentences <= self.test_sentences:
            raise ValueError("need 1 <= max_sentences <= test_sentences")
        if self.concat_sentences < 1:
            raise ValueError("concat_sentences must be >= 1")
        # The longest sentence (DET ADJ NOUN VERB DET ADJ NOUN PREP DET ADJ NOUN) must fit.
        if self.max_train_length < 11:
            raise ValueError("max_train_length must fit the longest sentence (11 tokens)")
        # Shorter examples are drawn again, so the shortest sentences (DET NOUN VERB) must fit.
        if self.max_test_length is not None and \
                self.max_test_length < max(self.max_train_length, 4 * self.concat_sentences - 1):
            raise ValueError("max_test_length must be >= max_train_length and fit concat_sentences sentences")


def _pseudo_words(rng, count, syllables, taken):
    """`count` distinct two-syllable words not in `taken`."""
    pool = [a + b for a, b in itertools.product(syllables, repeat=2) if a + b not in taken]
    words = rng.sample(pool, count)
    taken.update(words)
    return words


def lexicon(seed):
    """Per word class: the source words and their translations (index-aligned)."""
    rng = random.Random(f"lexicon-{seed}")
    source_syllables = [c + v for c in "bdgklmnprst" for v in "aeiou"]
    target_syllables = [c + v for c in "fhjvwxzcy" for v in "aeiouy"]
    taken = set()
    return {
        name: (_pseudo_words(rng, size, source_syllables, taken), _pseudo_words(rng, size, target_syllables, taken))
        for name, size in CLASS_SIZES.items()
    }


class _Grammar:
    def __init__(self, task):
        self.task = task
        self.words = lexicon(task.seed)

    def _word(self, rng, name):
        """A (source, target) word pair of class `name`."""
        source, target = self.words[name]
        i = rng.randrange(len(source))
        return source[i], target[i]

    def _noun_phrase(self, rng):
        det, noun = self._word(rng, "det"), self._word(rng, "noun")
        if rng.random() < self.task.adjective_rate:
            adj = self._word(rng, "adj")
            return [det[0], adj[0], noun[0]], [det[1], noun[1], adj[1]]
        return [det[0], noun[0]], [det[1], noun[1]]

    def sentence(self, rng):
        subject, verb = self._noun_phrase(rng), self._word(rng, "verb")
        source, target = subject[0] + [verb[0]], subject[1]
        if rng.random() < self.task.object_rate:
            obj = self._noun_phrase(rng)
            source, target = source + obj[0], target + obj[1]
        if rng.random() < self.task.prepositional_rate:
            prep, np = self._word(rng, "prep"), self._noun_phrase(rng)
            source, target = source + [prep[0]] + np[0], target + np[1] + [prep[1]]
        return source, target + [verb[1]]

    def example(self, rng, sentences):
        pairs = [self.sentence(rng) for _ in range(sentences)]
        return [" ".join(join_segments([pair[side] for pair in pairs], DEFAULT_SEP)) for side in (0, 1)]


def generate(task):
    """{set name: list of (source line, target line)} for train and EVAL_SETS."""
    grammar = _Grammar(task)
    short = task.max_train_length
    recipes = {  # set: (size, sentences per example, longest source or None)
        "train": (task.train_examples, lambda rng: rng.randint(1, task.max_sentences), short),
        "valid": (task.eval_examples, lambda rng: rng.randint(1, task.max_sentences), short),
        "test": (task.eval_examples, lambda rng: rng.randint(1, task.test_sentences), task.max_test_length),
        "concat": (task.eval_examples, lambda rng: task.concat_sentences, task.max_test_length),
    }
    sets = {}
    for name, (size, sentences, longest) in recipes.items():
        # One random stream per set: the sets do not change when another's size does.
        rng = random.Random(f"{name}-{task.seed}")
        examples = []
        while len(examples) < size:
            source, target = grammar.example(rng, sentences(rng))
            if longest is None or len(source.split()) <= longest:
                examples.append((source, target))
        sets[name] = examples
    return sets


def write_corpus(directory, task):
    """Write `{set}.src` / `{set}.tgt` into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, pairs in generate(task).items():
        (directory / f"{name}.src").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (directory / f"{name}.tgt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
