"""The --show-tree printer (casspec_ref.tools.trace): content of the plain-text trace on a
hand-built step and on real steps of a tiny model, colors only when asked, and bad input."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.speculative import generate_speculative
from casspec_ref.step_stats import StepTrace
from casspec_ref.tools.trace import TreePrinter, node_status
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import VerifyResult


def _decode(ids: list[int]) -> str:
    return f"t{ids[0]}"


def _hand_step(accept_first: bool) -> StepTrace:
    """Root 5 with children 7 (pld) and 8 (lvl); 7 has child 9 (lvl)."""
    tree = DraftTree(5)
    a = tree.add_child(0, 7, ChildRule.DETERMINISTIC)
    b = tree.add_child(0, 8, ChildRule.DETERMINISTIC)
    c = tree.add_child(a, 9, ChildRule.DETERMINISTIC)
    if accept_first:  # 7 accepted, then 9 rejected: the next token is a correction
        result = VerifyResult([a], [7], 4, decisions=[(a, True), (c, False)])
    else:  # 7 rejected, 8 accepted, 8 is a leaf: the next token is a bonus
        result = VerifyResult([b], [8], 3, decisions=[(a, False), (b, True)])
    cache = KVCache(tiny_llama(), 4, torch.float32, torch.device("cpu"))
    return StepTrace(1, tree, ["root", "pld", "lvl", "lvl"], result, [5, 7], cache)


def _node_line(text: str, token: str) -> str:
    [line] = [ln for ln in text.splitlines() if f"'{token}' [" in ln]
    return line


def _mark(text: str, token: str) -> str:
    return _node_line(text, token).split("─ ")[1][0]


def test_hand_built_step_marks_every_node() -> None:
    for accept_first in (True, False):
        trace = _hand_step(accept_first)
        text = TreePrinter(_decode, color=False).format(trace)
        assert "\x1b" not in text
        assert "legend: [pld]  [lvl]" in text
        assert "'t5'  (root" in text
        assert _mark(text, "t7") == ("+" if accept_first else "x")
        assert _mark(text, "t8") == ("." if accept_first else "+")
        assert _mark(text, "t9") == ("x" if accept_first else ".")
        assert _node_line(text, "t7").endswith("[pld]")
        assert _node_line(text, "t9").endswith("[lvl]")
        kind = "correction" if accept_first else "bonus"
        nxt = "t4" if accept_first else "t3"
        assert f"=> next '{nxt}' ({kind}" in text
        commit = "'t7'(pld) 't4'(target)" if accept_first else "'t8'(lvl) 't3'(target)"
        assert f"commit: {commit}" in text
        # The child of node 7 is drawn one level deeper than 7 itself.
        lines = text.splitlines()
        assert lines.index(_node_line(text, "t9")) == lines.index(_node_line(text, "t7")) + 1
        assert _node_line(text, "t9").index("t9") > _node_line(text, "t7").index("t7")


def test_node_status_stopped() -> None:
    trace = _hand_step(True)
    result = VerifyResult([1], [7], None, stopped=True, decisions=[(1, True)])
    info = node_status(trace.tree, result)
    assert info.next_kind == "stopped"
    assert info.status == ["accepted", "accepted", "untested", "untested"]
    text = TreePrinter(_decode, color=False).format(
        StepTrace(1, trace.tree, trace.sources, result, [], trace.cache)
    )
    assert "stopped after an accepted stop token" in text


def test_colors_only_when_asked() -> None:
    trace = _hand_step(True)
    colored = TreePrinter(_decode, color=True).format(trace, color=True)
    assert "\x1b[" in colored
    # Stripping the escapes gives back the plain text exactly.
    plain = TreePrinter(_decode, color=False).format(trace)
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored) == plain
    # A StringIO is not a terminal: automatic mode prints plain text.
    buf = io.StringIO()
    TreePrinter(_decode, stream=buf)(trace)
    assert "\x1b" not in buf.getvalue()
    # pld and the two levels get three different colors, stable for the printer's life.
    printer = TreePrinter(_decode, color=True)
    colors = {printer.color_of(s) for s in ("pld", "a", "b")}
    assert len(colors) == 3 and printer.color_of("a") == printer.color_of("a")


def _model() -> Transformer:
    model = random_init_(
        Transformer(tiny_llama(vocab_size=32, max_seq_len=128)).to(torch.float64), seed=0
    )
    with torch.no_grad():  # damp the last block so that the drafts are often right
        for name, param in model.named_parameters():
            if name.startswith("layers.2.") and name.endswith(("o.weight", "down.weight")):
                param.mul_(0.1)
    return model


@pytest.mark.parametrize("method", ["static-tree", "vchc", "cas-spec"])
def test_trace_of_a_tiny_model_matches_the_steps(method: str) -> None:
    model = _model()
    drafts = (
        ExecutionPlan(exit_after=2, name="exit"),
        ExecutionPlan(skip_mlp=frozenset({2}), name="skipmlp"),
    )
    buf = io.StringIO()
    printer = TreePrinter(_decode, stream=buf, color=False)
    steps: list[StepTrace] = []

    def on_step(trace: StepTrace) -> None:
        steps.append(trace)
        printer(trace)

    out = generate_speculative(
        model, [3, 5, 7, 9, 3, 5, 7, 11], 16, method=method, drafts=drafts, on_step=on_step
    )
    text = buf.getvalue()
    blocks = re.split(r"^(?=step \d+:)", text, flags=re.M)[1:]
    assert len(blocks) == len(steps) > 0
    committed: list[int] = []
    for trace, block in zip(steps, blocks, strict=True):
        tree, result = trace.tree, trace.result
        header = block.splitlines()[0]
        assert header.startswith(
            f"step {trace.step}: {len(tree) - 1} drafted, {len(result.accepted)} accepted"
        )
        node_lines = [ln for ln in block.splitlines() if re.match(r"^\s+[│├└ ]*[├└]─ ", ln)]
        assert len(node_lines) == len(tree) - 1
        marks = [ln.split("─ ")[1][0] for ln in node_lines]
        assert marks.count("+") == len(result.accepted)
        assert marks.count("x") == sum(1 for _, ok in result.decisions if not ok)
        # Depth-first order: the printed tokens and sources are the tree's, in a DFS walk.
        order: list[int] = []

        def dfs(node: int, tree: DraftTree = tree, order: list[int] = order) -> None:
            for child in tree.children(node):
                order.append(child)
                dfs(child)

        dfs(0)
        for node, line in zip(order, node_lines, strict=True):
            assert f"'t{tree.token(node)}' [{trace.sources[node]}]" in line
        commit = re.search(r"commit: (.*)$", block, flags=re.M)
        assert commit is not None
        committed += [int(t) for t in re.findall(r"'t(\d+)'", commit.group(1))]
    assert committed == out.tokens[1:]  # the first token comes from the prefill, not a step


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="decode"):
        TreePrinter("not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="color"):
        TreePrinter(_decode, color="yes")  # type: ignore[arg-type]
    trace = _hand_step(True)
    bad = StepTrace(1, trace.tree, ["root"], trace.result, [], trace.cache)
    with pytest.raises(ValueError, match="sources"):
        TreePrinter(_decode, color=False).format(bad)


def test_plot_tree_draws_every_node() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from casspec_ref.tools.trace import plot_tree

    trace = _hand_step(False)
    ax = plot_tree(trace.tree, trace.sources, trace.result, _decode)
    texts = [t.get_text() for t in ax.texts]
    for token in (5, 7, 8, 9):
        assert f"'t{token}'" in texts
    assert any(t.startswith("'t3'") and "bonus" in t for t in texts)
    np.testing.assert_equal(len(ax.lines), len(trace.tree))  # 3 edges + the next-token edge


def test_plot_tree_keeps_level_colors_across_pictures() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from casspec_ref.tools.trace import plot_tree

    trace = _hand_step(False)

    def fill_of(sources: list[str], token: str, levels: tuple[str, ...]) -> object:
        ax = plot_tree(trace.tree, sources, trace.result, _decode, levels=levels)
        [text] = [t for t in ax.texts if t.get_text() == f"'{token}'"]
        patch = text.get_bbox_patch()
        assert patch is not None
        return tuple(patch.get_facecolor())

    # Node 9 is drafted by "b"; whether "a" appears first or not, "b" keeps one color.
    first = fill_of(["root", "a", "a", "b"], "t9", ("a", "b"))
    second = fill_of(["root", "b", "b", "b"], "t9", ("a", "b"))
    unfixed = fill_of(["root", "b", "b", "b"], "t9", ())
    assert first == second != unfixed
