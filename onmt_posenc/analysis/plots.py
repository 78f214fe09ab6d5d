"""PNG figures of the analyses (matplotlib, no display needed)."""
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def heatmap(values, row_labels, col_labels, path, title, xlabel, ylabel, vmin=None, vmax=None,
            cmap="viridis", cbar_label=None, annotate=True, fmt="{:.2f}"):
    """A labelled matrix; cells hold their value when `annotate`; None cells stay blank."""
    values = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    rows, cols = len(row_labels), len(col_labels)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * cols + 2.5), max(3.5, 0.6 * rows + 1.8)))
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    tilted = max(map(len, col_labels)) > 4
    ax.set_xticks(range(cols), col_labels, rotation=45 if tilted else 0, ha="right" if tilted else "center")
    ax.set_yticks(range(rows), row_labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    bar = fig.colorbar(image, ax=ax)
    if cbar_label:
        bar.set_label(cbar_label)
    if annotate:
        for i in range(rows):
            for j in range(cols):
                value = values[i, j]
                if np.isnan(value):
                    continue
                red, green, blue, _ = image.cmap(image.norm(value))
                dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # perceived luminance
                ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    return save(fig, path)


def figure(width=6.5, height=4.0):
    return plt.subplots(figsize=(width, height))


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curves(lines, path, title, xlabel, ylabel, log=False):
    """One line per label: {label: [(x, y), ...]}."""
    fig, ax = figure()
    for label, points in lines.items():
        ax.plot(*zip(*points), marker=".", label=label)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)
