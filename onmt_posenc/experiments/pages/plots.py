"""A page's figure, drawn from the same judged differences its text quotes: `differences` plots
each comparison's estimate with its two-sided 95% interval (a hollow point where too few seeds
gave none: not judged), one panel per family of comparisons, and returns the page's Markdown
image line. The PNG is written only when the pages are written (`onmt-posenc pages`, not
`--check` nor the tests' renders), and only where what it shows changed: its bytes depend on the
machine's fonts, so a page's test compares its text, and the PNG keeps a digest of what it shows."""
import hashlib
import json
import struct
from pathlib import Path

from onmt_posenc.analysis import plots
from onmt_posenc.experiments.pages.records import RecordError
from onmt_posenc.experiments.pages.words import judged, number

DIGEST_KEY = "onmt-posenc data"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def differences(folder, draw, path, title, panels):
    """The image line of `path` (relative to the page's `folder`), drawn there when `draw`:
    `panels` is [(panel title, x axis label, [(label, figures)])], figures a judged difference's
    (estimate; margin where judged)."""
    shown = [(str(name), str(xlabel), [(str(label), _interval(figures, label)) for label, figures in rows])
             for name, xlabel, rows in panels]
    if not shown or not all(rows for _, _, rows in shown):
        raise RecordError(f"{path}: a differences plot needs panels, each with comparisons")
    target = Path(folder) / path
    digest = hashlib.sha256(json.dumps([title, shown]).encode()).hexdigest()
    if draw and _digest(target) != digest:
        _draw(target, title, shown, digest)
    return f"![{title}]({path})"


def _interval(figures, label):
    estimate = number(figures["estimate"])
    if not judged(figures):
        return estimate, None
    return estimate, number(figures["margin"])


def _draw(target, title, panels, digest):
    longest = max(len(rows) for _, _, rows in panels)  # every panel's rows at the same spacing, from the top
    fig, axes = plots.plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.32 * longest + 1.6), squeeze=False)
    fig.suptitle(title, fontsize=10)
    for ax, (name, xlabel, rows) in zip(axes[0], panels):
        places = [longest - 1 - index for index in range(len(rows))]
        for y, (label, (estimate, margin)) in zip(places, rows):
            if margin is None:
                ax.plot(estimate, y, "o", markerfacecolor="white", color="tab:gray")
            else:
                ax.errorbar(estimate, y, xerr=margin, fmt="o", color="tab:blue", capsize=3)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(places, [label for label, _ in rows])
        ax.set_ylim(-0.6, longest - 0.4)
        ax.set_xlabel(xlabel)
        ax.set_title(name, fontsize=9)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(target, dpi=110, metadata={DIGEST_KEY: digest})
    plots.plt.close(fig)


def _digest(path):
    """The digest a PNG of ours keeps in its text chunk, else None."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    at = len(PNG_SIGNATURE)
    while data.startswith(PNG_SIGNATURE) and at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        key, _, value = data[at + 8:at + 8 + length].partition(b"\0")
        if kind == b"tEXt" and key == DIGEST_KEY.encode():
            return value.decode("latin-1")
        at += 12 + length
    return None
