"""How a page shows what its expressions read: numbers to a stated number of decimals, signed
or not, counts with thousands separators, and a judged difference with its verdict in the
claims engine's own words (claims.batch.family_verdict), so that no verdict word is typed."""
import math

from onmt_posenc.experiments.claims.batch import CONFIDENCE, degrees_in_words, family_figures, family_verdict
from onmt_posenc.experiments.pages.records import RecordError


def number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(f"{value!r} is not a number a page can show")
    return value


def fixed(value, digits=2):
    """1.234 -> '1.23' (digits 2)."""
    return f"{number(value):.{digits}f}"


def signed(value, digits=2):
    """1.234 -> '+1.23', -1.234 -> '-1.23' (digits 2): a difference."""
    return f"{number(value):+.{digits}f}"


def count(value):
    """1234 -> '1,234': a count, which a record must hold as a whole number."""
    if not float(number(value)).is_integer():
        raise RecordError(f"{value!r} is not a count")
    return f"{int(value):,}"


def judged(figures):
    """Whether a difference's figures hold an interval (too few seeds for a spread: none)."""
    return "margin" in figures


def interval(figures, digits=2):
    """'+1.56 ± 1.07 (4 df)': a judged difference's estimate, its margin and degrees of freedom."""
    return (f"{signed(figures['estimate'], digits)} ± {fixed(figures['margin'], digits)} "
            f"({degrees_in_words(figures['df'])} df)")


def difference(figures, what, above="a difference measured", below=None, digits=2):
    """A difference judged in a family, its verdict first: `above`/`below` where it survives
    Holm's correction, else "no difference in `what` measured" with what it could have missed;
    then its estimate, margin, both p, the family's size and its degrees of freedom."""
    if not judged(figures):
        return f"{what}: {signed(figures['estimate'], digits)}, not judged (too few seeds for a spread)"
    return (f"{family_verdict(figures, above, below or above, what)} ({family_figures(figures, digits)}, over the "
            f"{figures['family']} comparisons of its table; {CONFIDENCE:.0%}, {degrees_in_words(figures['df'])} df)")


def verdict(figures, above="a difference measured", below=None, what="it"):
    """The verdict words alone of a difference judged in a family (see `difference`)."""
    return family_verdict(figures, above, below or above, what)


def _wrapped(text, width, first, rest):
    """`text`'s words wrapped at `width`, lines started by `first` then `rest`, never inside a
    figure's " = " or " ± " (Markdown joins the lines again: the page reads as source)."""
    words = " ".join(text.split()).replace(" = ", "\u00a0=\u00a0").replace(" ± ", "\u00a0±\u00a0").split(" ")
    lines, line = [], first
    for word in words:
        if line.strip() and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = rest
        line += ("" if line in (first, rest) else " ") + word
    return "\n".join(lines + [line]).replace("\u00a0", " ")


def prose(text, width=116):
    """A paragraph wrapped as the page shows it: `{% filter prose %}...{% endfilter %}`."""
    return _wrapped(text, width, "", "")


def item(text, width=116):
    """A list item, "- " and its lines indented under it: `{% filter item %}...{% endfilter %}`."""
    return _wrapped(text, width, "- ", "  ")


def claim_verdict(claim):
    """A claims row's verdict in the engine's words: a judged comparison's (figures.verdict), else
    why it was not judged (the last clause of what it measured)."""
    figures = claim["figures"] if "figures" in claim else {}
    return figures["verdict"] if "verdict" in figures else claim["measured"].rsplit("; ", 1)[-1]


FILTERS = {"fixed": fixed, "signed": signed, "count": count, "prose": prose, "item": item}
FUNCTIONS = {"interval": interval, "difference": difference, "verdict": verdict, "claim_verdict": claim_verdict}
