"""Write one PNG chart from a tidy DataFrame with consistent styling."""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402


def human(x, _pos=None):
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def make_chart(df, x, y, kind, title, out, ylabel=None):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if kind == "line":
        ax.plot(df[x], df[y], marker="o", linewidth=2)
    elif kind == "barh":
        data = df.sort_values(y)
        ax.barh(data[x].astype(str), data[y])
        ax.set_xlim(left=0)
    else:
        ax.bar(df[x].astype(str), df[y])
        ax.set_ylim(bottom=0)
    ax.set_title(title, loc="left", fontsize=13)
    ax.set_ylabel(ylabel or y)
    ax.yaxis.set_major_formatter(FuncFormatter(human))
    ax.spines[["top", "right"]].set_visible(False)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    path, x, y, kind, out = sys.argv[1:6]
    make_chart(pd.read_csv(path), x, y, kind, f"{y} by {x}", out)
