"""The visual trace: each speculative step's token tree, colored by the draft that proposed it.

Scope: ``python -m casspec_ref generate --show-tree`` and the tree pictures of
the tutorials. It reads what `casspec_ref.speculative.generate_speculative` hands to ``on_step``
(a `StepTrace`: the drafted `DraftTree`, the draft level of every node, the `VerifyResult`) and
draws nothing else: it never touches the model, the cache or the random source, so turning the
trace on cannot change what is generated.

What a learner sees per step (docs/method.md §4-5):
- every node of the tree, indented with box-drawing characters, colored by its draft level
  (``pld``, the model draft levels, ...) with a legend, and marked ``+`` accepted, ``x`` rejected
  (tested and refused by the verifier) or ``.`` not tested (below a rejection, or beyond the
  length limit);
- the next token drawn by the target: the *bonus* token when the walk stopped at a node whose
  children were not tested (a leaf), the *correction* when every child was rejected and the
  token came from the residual law;
- the committed tokens of the step, each colored by who proposed it.

Notable choices:
- ``color=None`` (the default) colors only when the stream is a terminal and ``NO_COLOR`` is not
  set (https://no-color.org), so that a redirected ``--show-tree`` stays plain text.
- Colors are assigned to draft levels in order of first appearance and kept for the whole run,
  so a level keeps its color from step to step; ``pld`` is always yellow.
- `plot_tree` draws the same picture with matplotlib (imported lazily: it is a dev dependency,
  not a runtime one) for the notebooks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from casspec_ref.dytc_config import PLD
from casspec_ref.step_stats import StepTrace
from casspec_ref.tree import DraftTree
from casspec_ref.verify import VerifyResult

#: The source name of node 0 (the last committed token) in a `StepTrace`.
ROOT = "root"
#: The name the trace gives to the token the target itself drew (bonus or correction).
TARGET = "target"

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
# Foreground colors for model draft levels, in order of first appearance (bright variants read
# well on both dark and light terminals).
_LEVEL_COLORS = ("\x1b[36m", "\x1b[35m", "\x1b[34m", "\x1b[32m", "\x1b[91m", "\x1b[96m")
_FIXED_COLORS = {PLD: "\x1b[33m", ROOT: "\x1b[37m", TARGET: "\x1b[1;97m"}
# The same roles for matplotlib pictures (tab10 entries).
_LEVEL_MPL = ("tab:cyan", "tab:purple", "tab:blue", "tab:green", "tab:red", "tab:olive")
_FIXED_MPL = {PLD: "gold", ROOT: "lightgrey", TARGET: "white"}

ACCEPTED, REJECTED, UNTESTED = "accepted", "rejected", "untested"
_MARKS = {ACCEPTED: "+", REJECTED: "x", UNTESTED: "."}


@dataclass(frozen=True)
class NodeStatus:
    """What happened to every node of one step's tree (node 0 is the root)."""

    status: list[str]
    #: "bonus" (drawn from p at a node whose children were not tested), "correction" (drawn from
    #: the residual after every child was rejected) or "stopped" (an accepted stop token)
    next_kind: str


def node_status(tree: DraftTree, result: VerifyResult) -> NodeStatus:
    """Classify every node as accepted, rejected or untested, and name the next token's kind."""
    status = [UNTESTED] * len(tree)
    status[0] = ACCEPTED  # the root was committed by the previous step
    for node, accepted in result.decisions:
        status[node] = ACCEPTED if accepted else REJECTED
    for node in result.accepted:
        status[node] = ACCEPTED
    last = result.accepted[-1] if result.accepted else 0
    if result.next_token is None:
        kind = "stopped"
    elif any(tree.parent(node) == last for node, _ in result.decisions):
        kind = "correction"
    else:
        kind = "bonus"
    return NodeStatus(status, kind)


def _token_text(decode: Callable[[Sequence[int]], str], token: int) -> str:
    """A token's text, quoted and escaped so that spaces and newlines are visible."""
    try:
        text = decode([token])
    except ValueError:
        text = f"<{token}>"
    return repr(text)


class TreePrinter:
    """An ``on_step`` callback that prints each step's tree (see the module docstring).

    Args:
        decode: token ids -> text (``Tokenizer.decode``); tiny test models can pass any function.
        stream: where to print (default ``sys.stdout`` at call time).
        color: True for ANSI colors, False for plain text, None to decide from the stream.
        show_ids: also print each node's token id (useful with tiny models).
    """

    def __init__(
        self,
        decode: Callable[[Sequence[int]], str],
        stream: TextIO | None = None,
        color: bool | None = None,
        show_ids: bool = False,
    ) -> None:
        if not callable(decode):
            raise ValueError(f"decode must be a function from token ids to text, got {decode!r}")
        if color not in (None, True, False):
            raise ValueError(f"color must be True, False or None (automatic), got {color!r}")
        self.decode = decode
        self.stream = stream
        self.color = color
        self.show_ids = show_ids
        self._palette: dict[str, str] = dict(_FIXED_COLORS)
        self._legend_shown: dict[str, None] = {}  # insertion-ordered set

    def _use_color(self, stream: TextIO) -> bool:
        if self.color is not None:
            return self.color
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty()) and "NO_COLOR" not in os.environ

    def color_of(self, source: str) -> str:
        """The ANSI color of a draft level (assigned on first sight, then fixed)."""
        if source not in self._palette:
            used = sum(1 for name in self._palette if name not in _FIXED_COLORS)
            self._palette[source] = _LEVEL_COLORS[used % len(_LEVEL_COLORS)]
        return self._palette[source]

    def format(self, trace: StepTrace, color: bool = False) -> str:
        """The text printed for one step (without a trailing newline)."""
        tree, sources, result = trace.tree, trace.sources, trace.result
        if len(sources) != len(tree):
            raise ValueError(
                f"the trace has {len(sources)} sources for a tree of {len(tree)} nodes; "
                "every node needs the name of the draft that proposed it"
            )
        info = node_status(tree, result)

        def paint(text: str, source: str, style: str = "") -> str:
            if not color:
                return text
            return f"{style}{self.color_of(source)}{text}{_RESET}"

        def label(node: int) -> str:
            token = tree.token(node)
            text = _token_text(self.decode, token)
            if self.show_ids:
                text += f" #{token}"
            return text

        lines = []
        drafted = len(tree) - 1
        new_sources = [s for s in dict.fromkeys(sources[1:]) if s not in self._legend_shown]
        if new_sources or trace.step == 1:
            # The legend lists every level seen so far, in order of first appearance.
            self._legend_shown.update(dict.fromkeys(new_sources))
            seen = list(self._legend_shown) or ["(no drafts yet)"]
            legend = "  ".join(paint(f"[{s}]", s) if s in self._legend_shown else s for s in seen)
            lines.append(
                f"legend: {legend}  |  + accepted  x rejected  . not tested  "
                f"{paint('=> next', TARGET)} (target)"
            )
        lines.append(
            f"step {trace.step}: {drafted} drafted, {len(result.accepted)} accepted, "
            f"depth {tree.max_depth}, commits {len(result.emitted)} token(s)"
        )
        lines.append(f"  {paint(label(0), ROOT)}  (root: last committed token)")

        def walk(node: int, indent: str) -> None:
            children = tree.children(node)
            for i, child in enumerate(children):
                last = i == len(children) - 1
                branch = "└─ " if last else "├─ "
                state = info.status[child]
                style = _BOLD if state == ACCEPTED else _DIM if state == UNTESTED else ""
                text = paint(label(child), sources[child], style)
                lines.append(f"  {indent}{branch}{_MARKS[state]} {text} [{sources[child]}]")
                walk(child, indent + ("   " if last else "│  "))

        walk(0, "")
        if result.next_token is not None:
            nxt = paint(_token_text(self.decode, result.next_token), TARGET)
            lines.append(f"  => next {nxt} ({info.next_kind}, drawn by the target)")
        else:
            lines.append("  => stopped after an accepted stop token")
        committed = [
            paint(label(node), sources[node], _BOLD) + f"({sources[node]})"
            for node in result.accepted
        ]
        if result.next_token is not None:
            committed.append(
                paint(_token_text(self.decode, result.next_token), TARGET) + "(target)"
            )
        lines.append("  commit: " + " ".join(committed))
        return "\n".join(lines)

    def __call__(self, trace: StepTrace) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        # The leading newline ends a line a token streamer may have left open (the CLI streams
        # the committed text to the same stream) and separates the steps.
        stream.write("\n" + self.format(trace, color=self._use_color(stream)) + "\n")
        stream.flush()


def plot_tree(
    tree: DraftTree,
    sources: Sequence[str],
    result: VerifyResult,
    decode: Callable[[Sequence[int]], str] | None = None,
    ax: Any = None,
    title: str | None = None,
    levels: Sequence[str] = (),
) -> Any:
    """Draw one step's tree with matplotlib: node fill = draft level, edge = accepted (thick
    green), rejected (red) or not tested (grey, dashed); the next token hangs below the accepted
    path in white. Returns the axes. Needs matplotlib (a dev dependency).

    ``levels`` fixes the color order of the model draft levels (e.g. the hierarchy's plan
    names), so that a level keeps its color across several pictures; levels not listed get the
    next colors in order of appearance.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if len(sources) != len(tree):
        raise ValueError(f"{len(sources)} sources for a tree of {len(tree)} nodes")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    decode = decode or (lambda ids: str(ids[0]))
    info = node_status(tree, result)

    # Layout: depth on x, leaves spread on y in depth-first order (parents centred on children).
    ys: dict[int, float] = {}
    counter = [0.0]

    def place(node: int) -> float:
        children = tree.children(node)
        if not children:
            ys[node] = counter[0]
            counter[0] += 1
        else:
            ys[node] = sum(place(c) for c in children) / len(children)
        return ys[node]

    place(0)
    palette: dict[str, str] = dict(_FIXED_MPL)
    for s in dict.fromkeys([*levels, *sources[1:]]):
        if s not in palette:
            used = sum(1 for name in palette if name not in _FIXED_MPL)
            palette[s] = _LEVEL_MPL[used % len(_LEVEL_MPL)]
    edge_style = {
        ACCEPTED: dict(color="green", lw=3, ls="-"),
        REJECTED: dict(color="red", lw=1.5, ls="-"),
        UNTESTED: dict(color="grey", lw=1, ls="--"),
    }
    for node in range(1, len(tree)):
        parent = tree.parent(node)
        ax.plot(
            [tree.depth(parent), tree.depth(node)],
            [ys[parent], ys[node]],
            zorder=1,
            **edge_style[info.status[node]],
        )
    for node in range(len(tree)):
        state = info.status[node]
        ax.text(
            tree.depth(node),
            ys[node],
            _token_text(decode, tree.token(node)),
            ha="center",
            va="center",
            fontsize=9,
            zorder=2,
            fontweight="bold" if state == ACCEPTED else "normal",
            bbox=dict(
                boxstyle="round",
                fc=palette[sources[node]],
                ec="black" if state != REJECTED else "red",
                alpha=1.0 if state != UNTESTED else 0.45,
            ),
        )
    if result.next_token is not None:
        last = result.accepted[-1] if result.accepted else 0
        x, y = tree.depth(last) + 1, ys[last] + (0.5 if tree.children(last) else 0.0)
        ax.plot([tree.depth(last), x], [ys[last], y], color="black", lw=1, ls=":", zorder=1)
        ax.text(
            x,
            y,
            _token_text(decode, result.next_token) + f"\n({info.next_kind})",
            ha="center",
            va="center",
            fontsize=9,
            zorder=2,
            bbox=dict(boxstyle="round", fc="white", ec="black", ls=":"),
        )
    handles = [Patch(fc=palette[s], ec="black", label=s) for s in dict.fromkeys(sources)]
    handles.append(Patch(fc="white", ec="black", ls=":", label="next token (target)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_xlim(-0.6, tree.max_depth + 1.6)
    ax.set_ylim(-0.6, max(ys.values()) + 0.6 + (0.5 if result.next_token is not None else 0.0))
    ax.invert_yaxis()
    ax.set_xlabel("depth (position after the committed prefix)")
    ax.set_yticks([])
    ax.set_title(
        title or "green = accepted, red = rejected, dashed = not tested; fill = draft level"
    )
    return ax
