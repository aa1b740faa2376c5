"""The overview figure of one speculative step: draft, one verify forward, accept/reject, commit.

``python tutorials/speculative_step_figure.py`` writes docs/speculative_step.png (shown in the
README); notebook 3 calls `draw` to show the same picture inline. The tokens are illustrative.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg") if __name__ == "__main__" else None
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "speculative_step.png"

PREFIX = ["The", "cat", "sat"]
DRAFTED = ["on", "the", "sofa"]  # proposed by the draft, one cheap forward each
VERDICT = ["accepted", "accepted", "rejected"]
REPLACEMENT = "mat"  # drawn from the residual norm(max(p - q, 0)) at the rejected position
COLOURS = {"prefix": "#d9d9d9", "draft": "#9ecae1", "accepted": "#a1d99b", "rejected": "#fc9272"}


def _box(ax, x, y, text, colour, width=0.9, height=0.5):
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.03",
            facecolor=colour,
            edgecolor="black",
            linewidth=0.8,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def _arrow(ax, start, end, text=""):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="black"))
    if text:
        ax.text(
            (start[0] + end[0]) / 2 + 0.1, (start[1] + end[1]) / 2, text, fontsize=8, va="center"
        )


def draw(ax=None):
    """Draw the four stages of one speculative step (rows, top to bottom) on ``ax``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.6))
    rows = {"draft": 4.0, "verify": 2.9, "decide": 1.8, "commit": 0.6}
    labels = {
        "draft": "1. draft: a cheap model\nproposes k tokens,\none token per forward (q)",
        "verify": (
            "2. verify: ONE target forward\nover all k drafted tokens\ngives p at k + 1 positions"
        ),
        "decide": (
            "3. accept x with prob.\nmin(1, p(x)/q(x)), left to right;\n"
            "at the first rejection, stop"
        ),
        "commit": (
            "4. commit the accepted tokens\n+ one token from the target\n"
            "(residual, or bonus if all kept)"
        ),
    }
    for stage, y in rows.items():
        ax.text(-0.3, y, labels[stage], ha="right", va="center", fontsize=8.5)
    x0 = 0.6
    for i, token in enumerate(PREFIX):
        _box(ax, x0 + i, rows["draft"], token, COLOURS["prefix"])
    for i, token in enumerate(DRAFTED):
        _box(ax, x0 + len(PREFIX) + i, rows["draft"], token, COLOURS["draft"])
    # The verify forward: one wide box over the drafted positions.
    left = x0 + len(PREFIX) - 1 - 0.45
    right = x0 + len(PREFIX) + len(DRAFTED) - 1 + 0.45
    ax.add_patch(
        FancyBboxPatch(
            (left, rows["verify"] - 0.3),
            right - left,
            0.6,
            boxstyle="round,pad=0.03",
            facecolor="#fdd0a2",
            edgecolor="black",
            linewidth=0.8,
        )
    )
    ax.text(
        (left + right) / 2,
        rows["verify"],
        "target forward (tree / causal mask)",
        ha="center",
        va="center",
        fontsize=9,
    )
    _arrow(
        ax, ((left + right) / 2, rows["draft"] - 0.3), ((left + right) / 2, rows["verify"] + 0.32)
    )
    for i, (token, verdict) in enumerate(zip(DRAFTED, VERDICT, strict=True)):
        x = x0 + len(PREFIX) + i
        mark = "keep" if verdict == "accepted" else "reject"
        _box(ax, x, rows["decide"], f"{token}: {mark}", COLOURS[verdict], width=0.95)
    _arrow(
        ax, ((left + right) / 2, rows["verify"] - 0.32), ((left + right) / 2, rows["decide"] + 0.3)
    )
    committed = PREFIX + DRAFTED[: VERDICT.index("rejected")] + [REPLACEMENT]
    for i, token in enumerate(committed):
        colour = COLOURS["prefix"] if i < len(PREFIX) else COLOURS["accepted"]
        if i == len(committed) - 1:
            colour = "#fdae6b"
        _box(ax, x0 + i, rows["commit"], token, colour)
    _arrow(
        ax, ((left + right) / 2, rows["decide"] - 0.3), ((left + right) / 2, rows["commit"] + 0.3)
    )
    ax.text(
        x0 + len(committed) - 1,
        rows["commit"] - 0.45,
        "from the residual",
        ha="center",
        fontsize=7.5,
    )
    ax.text(
        x0 + len(PREFIX) + 1,
        -0.25,
        "3 tokens committed for one target forward; the KV cache keeps only the accepted rows",
        ha="center",
        fontsize=8.5,
        style="italic",
    )
    ax.set_xlim(-3.2, x0 + len(PREFIX) + len(DRAFTED))
    ax.set_ylim(-0.5, 4.5)
    ax.set_axis_off()
    ax.set_title("One speculative step", fontsize=11)
    return ax


def main() -> None:
    fig, ax = plt.subplots(figsize=(9, 5.6))
    draw(ax)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
