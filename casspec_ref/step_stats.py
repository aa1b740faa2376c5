"""What one speculative generation records: a `StepTrace` per step, which its observers see, and
`StepStats`, the statistics gathered over the run from the prefill and every trace (the
``stats`` of its `GenerationResult`). The loop that makes them is `casspec_ref.speculative`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

from casspec_ref.kv_cache import KVCache
from casspec_ref.tree import DraftTree
from casspec_ref.verify import VerifyResult


@dataclass(frozen=True)
class StepTrace:
    """What the observers of a step see (`StepStats`, then ``on_step``, e.g. a --show-tree trace):
    the tree, each node's draft name, the verifier's result, the tokens whose K/V the cache holds
    after the commit (prompt + committed, root included), the live cache (read it only), and
    what the step cost: its draft forwards and its seconds drafting (of which planning) and
    verifying."""

    step: int
    tree: DraftTree
    sources: list[str]
    result: VerifyResult
    prefix: list[int]
    cache: KVCache
    draft_forwards: int = 0
    draft_s: float = 0.0
    # Planning: drafting time not spent in draft forwards or lookups (policy, bookkeeping).
    plan_s: float = 0.0
    verify_s: float = 0.0  # the target forward, the verifier and the commit


@dataclass
class StepStats:
    """The statistics of one speculative generation, gathered by observing its prefill and each
    step; `summary` is the ``stats`` dict of its `GenerationResult`: every field below, plus
    ``mat`` and ``time_other_s``."""

    method: str = ""
    levels: list[str] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)  # drafted tokens accepted per step
    steps: int = 0
    target_forwards: int = 0  # the prefill's included
    proposed: Counter[str] = field(default_factory=Counter)  # drafted nodes per draft name
    accepted: Counter[str] = field(default_factory=Counter)  # accepted nodes per draft name
    draft_forwards: int = 0
    tree_sizes: list[int] = field(default_factory=list)  # nodes per step, the root included
    branching_steps: int = 0  # steps whose tree has a node with two children or more
    time_draft_s: float = 0.0
    time_plan_s: float = 0.0
    time_verify_s: float = 0.0  # the prefill's forward included

    def observe_prefill(self, seconds: float) -> None:
        self.target_forwards += 1
        self.time_verify_s += seconds

    def observe(self, trace: StepTrace) -> None:
        tree = trace.tree
        self.steps += 1
        self.target_forwards += 1
        self.draft_forwards += trace.draft_forwards
        self.accepted_lengths.append(len(trace.result.accepted))
        self.tree_sizes.append(len(tree))
        self.branching_steps += int(any(len(tree.children(n)) > 1 for n in range(len(tree))))
        self.proposed.update(trace.sources[1:])
        self.accepted.update(trace.sources[node] for node in trace.result.accepted)
        self.time_draft_s += trace.draft_s
        self.time_plan_s += trace.plan_s
        self.time_verify_s += trace.verify_s

    def summary(self, new_tokens: int, seconds: float) -> dict[str, Any]:
        """Every field, with `mat` (tokens per target forward) and the time outside drafting and
        verifying, for a generation of `new_tokens` tokens that took `seconds` in all."""
        stats = {f.name: getattr(self, f.name) for f in fields(self)}
        stats["mat"] = new_tokens / max(1, self.target_forwards) if new_tokens else 0.0
        stats["time_other_s"] = max(0.0, seconds - self.time_draft_s - self.time_verify_s)
        return stats
