"""Replaying drafting schedules on recorded acceptances: DyTC against fixed rules without noise.

Scope: one bench run of a speculative method is one path: DyTC's estimates decide which drafts
it tests, what it tests decides its estimates, and timing noise moves every ratio by a few per
cent. Comparing two policies that way takes many runs. Under greedy decoding the answer is fixed
(the naive loop's), so whether a drafted token is accepted is known in advance: a node is
accepted when its path is a prefix of the answer. A replay records, per question:

- the answer (greedy, the target's own);
- each draft level's top-3 next tokens and probabilities at every answer position, read from
  the target's K/V as a draft reads them in decoding (`TeacherForced`; exact for the first token
  of a chain, the later ones read the draft's own K/V for the tokens it drafted in that step);
- the target's top-4 at every position (what a verify forward gives the recycled-token table);

and, once, this machine's costs: the target's forward over T = 1..32 new tokens, each level's
one-token forward. It then decodes every question again with no model: a schedule grows trees
through `ReplayDrafter` (a `casspec_ref.dytc.TreeDrafter`), the recorded answer verifies them,
and the clock is the measured costs, plus a per-call overhead for a draft forward and a per-step
overhead for a speculative step (both measured in decoding on the same machine, with the costs,
or stated by the caller), the free drafts' own seconds (a prompt lookup, a recycled-token walk:
measured with the costs), plus the real Python time of DyTC's own decisions. DyTC learns what
decoding lets it time: a step's verify forward with the step's overhead (the verifier and the
cache commit are timed with it), a draft call's forward without the bookkeeping around it.
Same answer, same costs, one path per policy: two policies' ratios differ only by what they
decided. What a replay does not model: sampling, timing noise, and draft tokens below a rejected
one (never tested, so only their count matters).

`hindsight` is the other end: the least time in which any schedule of chains could decode a
record if it knew the answer (a shortest path over answer positions); how far a policy is from
it measures what not knowing the answer costs.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig
from casspec_ref.dsia.recycle import TokenRecycler
from casspec_ref.dytc import DyTC
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import Outcome
from casspec_ref.dytc_refinements import LONGEST_MATCH, outcome
from casspec_ref.schedules import Schedule
from casspec_ref.tools.teacher_forced import TeacherForced

DRAFT_TOP = 3  # alternatives kept per draft position (DyTC's default `siblings`)
TARGET_TOP = 4  # successors the recycled-token table keeps (`TokenRecycler` width)
Grown = list[tuple[int, int, float | None]]  # (node, parent, confidence) per added node


@dataclass
class Recorded:
    """One question's truth: the prompt, the greedy answer, and per answer position ``i`` (the
    token at ``len(prompt) + i``) what each draft and the target predict there."""

    category: str
    prompt: list[int]
    answer: list[int]
    drafts: dict[str, tuple[list[list[int]], list[list[float]]]]  # level -> (ids, probs)
    target: tuple[list[list[int]], list[list[float]]]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Costs:
    """Seconds on the machine replayed: a target forward by new tokens, a draft call by level,
    the overheads decoding adds to them (a draft call's bookkeeping; a speculative step's
    verifier, cache commit and bookkeeping) and the free drafts' own time (one prompt lookup,
    one recycled-token walk), measured on the same machine (benchmarks/dytc_replay.py,
    ``measure_overheads``) or stated; none unless one of those."""

    verify: dict[int, float]
    draft: dict[str, float]
    draft_overhead: float = 0.0
    step_overhead: float = 0.0
    lookup_overhead: float = 0.0
    recycle_overhead: float = 0.0

    @classmethod
    def from_json(cls, raw: dict[str, Any], **overheads: float) -> Costs:
        """The costs a record keeps (``{"verify": {T: s}, "draft": {level: s}}``, and the
        measured ``"overheads": {"draft": s, "step": s, "lookup": s, "recycle": s}`` where it
        has them; JSON makes T a string), with `overheads` (``draft_overhead``,
        ``step_overhead``, ...) taking precedence."""
        verify = {int(t): float(s) for t, s in raw["verify"].items()}
        measured = {f"{name}_overhead": float(s) for name, s in raw.get("overheads", {}).items()}
        draft = {name: float(s) for name, s in raw["draft"].items()}
        return cls(verify, draft, **{**measured, **overheads})

    def verify_seconds(self, tokens: int) -> float:
        return self.verify[min(tokens, max(self.verify))]


def _top(logits: torch.Tensor, k: int) -> tuple[list[list[int]], list[list[float]]]:
    probs = torch.softmax(logits.double(), dim=-1)  # (W, V)
    values, ids = torch.topk(probs, k, dim=-1)  # (W, k)
    return ids.tolist(), [[round(p, 5) for p in row] for row in values.tolist()]


def record(
    model: Any,
    prompt: Sequence[int],
    answer: Sequence[int],
    levels: Sequence[Any],
    category: str = "",
) -> Recorded:
    """Record one question: `answer` must be the target's greedy continuation of `prompt`."""
    tf = TeacherForced(model, [*prompt, *answer], first=len(prompt))
    if tf.target_agreement() < 1.0:
        raise ValueError("record: the answer is not the target's greedy continuation")
    drafts = {plan.name: _top(tf.draft_logits(plan), DRAFT_TOP) for plan in levels}
    return Recorded(
        category, list(prompt), list(answer), drafts, _top(tf.target_logits, TARGET_TOP)
    )


class ReplayDrafter:
    """One step's tree over recorded predictions (the `TreeDrafter` DyTC grows trees through,
    plus what the fixed schedules use). Node ``n`` holds token ``tokens[n]`` at answer index
    ``index[n]`` (the root: the last committed token)."""

    def __init__(
        self,
        rec: Recorded,
        committed: int,
        pld: PromptLookup,
        recycler: TokenRecycler,
        costs: Costs,
        max_nodes: int,
        max_depth: int,
    ) -> None:
        self.rec, self.pld, self.recycler, self.costs = rec, pld, recycler, costs
        self.max_nodes, self.max_depth = max_nodes, max_depth
        self.levels = list(rec.drafts)  # cheapest first, as recorded
        self.tokens, self.index = [rec.answer[committed - 1]], [committed - 1]
        self.parent, self.depth, self.source, self.primary = [-1], [0], ["root"], [True]
        self.children: list[list[int]] = [[]]
        self.charged: dict[str, tuple[int, float]] = {}  # per draft: (calls, forward seconds)
        self.bookkeeping = 0.0  # seconds around the draft calls (not charged to a draft)
        self._lookups: dict[int, list[int]] = {}
        self._matched: dict[int, int] = {}  # node -> the length of lookup's match below it
        self._margins: dict[int, float] = {}  # chain-continuing model-drafted node -> margin
        self._fed: set[tuple[str, int]] = set()  # (level, node): one forward each

    # -- bookkeeping ---------------------------------------------------------------------------
    def _charge(self, name: str, seconds: float) -> None:
        calls, total = self.charged.get(name, (0, 0.0))
        self.charged[name] = (calls + 1, total + seconds)

    def _add(self, parent: int, token: int, source: str, primary: bool) -> int:
        self.tokens.append(token)
        self.index.append(self.index[parent] + 1)
        self.parent.append(parent)
        self.depth.append(self.depth[parent] + 1)
        self.source.append(source)
        self.primary.append(primary)
        self.children.append([])
        self.children[parent].append(len(self.tokens) - 1)
        return len(self.tokens) - 1

    def _path(self, node: int) -> list[int]:
        path = []
        while node > 0:
            path.append(self.tokens[node])
            node = self.parent[node]
        return path[::-1]

    def predictions(self, level: str, node: int) -> tuple[list[int], list[float]]:
        """The level's top tokens after `node` (one forward, charged once per node)."""
        if (level, node) not in self._fed:
            self._fed.add((level, node))
            self._charge(level, self.costs.draft[level])
            self.bookkeeping += self.costs.draft_overhead
        ids, probs = self.rec.drafts[level]
        row = min(self.index[node] + 1, len(ids) - 1)  # row i predicts answer[i]; past the end
        return ids[row], probs[row]  # of the answer a node is never tested

    # -- TreeDrafter ---------------------------------------------------------------------------
    def size(self) -> int:
        return len(self.tokens)

    def room(self, node: int) -> int:
        return max(0, min(self.max_nodes - self.size(), self.max_depth - self.depth[node]))

    def is_leaf(self, node: int) -> bool:
        return not self.children[node]

    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.charged.values())

    def lookup(self, node: int, k: int) -> list[int]:
        self._charge(PLD, self.costs.lookup_overhead)
        found = self.pld.match(k, self._path(node))
        self._matched[node] = found.ngram
        return list(found.tokens)

    def match(self, node: int) -> int:
        return self._matched.get(node, 0)

    def margin(self, node: int) -> float | None:
        return self._margins.get(node)

    def offers(self, node: int, draft: str) -> int:
        if draft == PLD:
            if node not in self._lookups:
                self._lookups[node] = self.lookup(node, self.room(node))
            return len(self._lookups[node])
        if draft == RECYCLE:
            return len(self.recycler.chain(self.tokens[node], self.room(node)))
        return 0

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        if draft == RECYCLE:
            return [p for _, p in self.recycler.alternatives(self.tokens[node], width)]
        return self.predictions(draft, node)[1][:width]

    def add_chain(self, node: int, tokens: Sequence[int], source: str) -> list[int]:
        added = []
        for token in tokens:
            if self.room(node) < 1:
                break
            node = self._add(node, token, source, True)
            added.append(node)
        return added

    def propose_children(self, level: str, node: int, count: int) -> list[tuple[int, float]]:
        """Up to `count` children of `node` from `level` (greedy: its top tokens)."""
        count = min(count, self.max_nodes - self.size())
        if count < 1 or self.room(node) < 1:
            return []
        ids, probs = self.predictions(level, node)
        added = [(self._add(node, ids[j], level, j == 0), probs[j]) for j in range(count)]
        self._margins[added[0][0]] = probs[0] - probs[1]  # greedy: the top token's margin
        return added

    def expand(self, node: int, draft: str, k: int, width: int) -> Grown:
        if draft == PLD:
            tokens = self._lookups.get(node) or self.lookup(node, k)
            return [(n, self.parent[n], None) for n in self.add_chain(node, tokens[:k], PLD)]
        if draft == RECYCLE:
            self._charge(RECYCLE, self.costs.recycle_overhead)
            first = self.recycler.alternatives(self.tokens[node], width)[: self.room(node)]
            if not first:
                return []
            kids: Grown = [
                (self._add(node, t, RECYCLE, j == 0), node, p) for j, (t, p) in enumerate(first)
            ]
            walk = self.recycler.chain(first[0][0], k - 1)
            chain = self.add_chain(kids[0][0], [t for t, _ in walk], RECYCLE)
            return (
                kids[:1] + [(n, self.parent[n], walk[i][1]) for i, n in enumerate(chain)] + kids[1:]
            )
        first = self.propose_children(draft, node, width)
        grown: Grown = [(c, node, p) for c, p in first[:1]]
        while grown and len(grown) < k:
            nxt = self.propose_children(draft, grown[-1][0], 1)
            if not nxt:
                break
            grown.append((nxt[0][0], grown[-1][0], nxt[0][1]))
        return grown + [(c, node, p) for c, p in first[1:]]

    def kind(self) -> str:
        """What drafted this step's tree: ``plain`` for the root alone, else its drafts joined by
        ``+``, the levels cheapest first, then the free drafts; a lookup with the length of the
        context match it copied from (``pld match 2``; 3 tokens or more: ``pld match 3+``)."""
        used = set(self.source[1:])
        if not used:
            return "plain"
        names = [level for level in self.levels if level in used]
        if PLD in used:
            first = self.source.index(PLD)  # the first looked-up node: its parent was matched
            match = self.match(self.parent[first])
            names.append(f"{PLD} match {match}" + ("+" if match >= LONGEST_MATCH else ""))
        return "+".join(names + ([RECYCLE] if RECYCLE in used else []))

    # -- the verifier ----------------------------------------------------------------------------
    def verify(self, policy: DyTC | None = None) -> tuple[list[int], list[tuple[Outcome, bool]]]:
        """Greedy verification against the answer: (accepted nodes, root first excluded;
        ``(outcome, accepted)`` per chain-continuing node whose parent was accepted, the outcome
        as `policy` learns it; without one, as the default `RefinedDyTC` does)."""
        answer, node = self.rec.answer, 0
        accepted: list[int] = []
        tested: list[tuple[Outcome, bool]] = []
        while True:
            nxt = None
            for child in self.children[node]:
                i = self.index[child]
                ok = i < len(answer) and self.tokens[child] == answer[i]
                if self.primary[child]:
                    draft, parent_draft = self.source[child], self.source[node]
                    margin = self.margin(child)
                    key = (
                        policy.outcome(draft, parent_draft, self.match(node), margin)
                        if policy is not None
                        else outcome(DyTCConfig(), draft, parent_draft, self.match(node), margin)
                    )
                    tested.append((key, ok))
                nxt = child if ok and nxt is None else nxt
            if nxt is None:
                return accepted, tested
            accepted.append(nxt)
            node = nxt


@dataclass
class StepKind:
    """A replay's steps of one kind (`ReplayDrafter.kind`): how many, the tokens they committed,
    their seconds, the part of those that is overhead (the step's and the draft calls'
    bookkeeping, and DyTC's own decisions), and the naive loop's seconds for the same tokens (one
    plain forward each). ``naive_seconds - seconds`` is what the kind gained; over every kind
    the gains add up to the naive loop's time less the replay's."""

    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    overhead_seconds: float = 0.0
    naive_seconds: float = 0.0

    @property
    def gained(self) -> float:
        """Seconds these steps saved against the naive loop (negative: lost)."""
        return self.naive_seconds - self.seconds


@dataclass
class Replayed:
    """One method's replay over questions: seconds, steps and tokens, per category, and its
    steps by kind (where the time went)."""

    seconds: dict[str, float]
    tokens: dict[str, int]
    steps: int = 0
    kinds: dict[str, StepKind] = field(default_factory=dict)


def replay(
    records: Sequence[Recorded],
    costs: Costs,
    schedule: Schedule | None = None,
    policy: DyTC | None = None,
    lookup: PromptLookupConfig | None = None,
) -> Replayed:
    """Decode every recorded answer again with `schedule` (one of the package's fixed
    schedules, `casspec_ref.schedules.SCHEDULES`, growing a `ReplayDrafter` through the same
    primitives it calls on a `StepDrafter`), or with DyTC's `policy` (its estimates carried
    across questions, as the bench carries them), or neither (the naive loop: one forward per
    token). `lookup`: prompt lookup's configuration (``pld:K`` sets its ``max_proposal``)."""
    out = Replayed({}, {})
    for rec in records:
        seconds, committed, n = 0.0, 1, len(rec.answer)  # the prefill's token is not counted
        pld = PromptLookup([*rec.prompt, rec.answer[0]], lookup)
        recycler = TokenRecycler(TARGET_TOP)
        while committed < n:
            d = ReplayDrafter(
                rec, committed, pld, recycler, costs, 32 if policy else 64, n - committed - 1
            )
            start = time.perf_counter()
            if policy is not None and not policy.ready():  # DyTC's first step times sizes
                for size in (1, *policy.config.calibration_sizes):
                    policy.verify_cost.observe(size, costs.verify_seconds(size))
            elif policy is not None:
                policy.grow(d, [*rec.drafts, *policy.free_drafts])
            elif schedule is not None and d.max_depth > 0:  # as `speculative.draft_tree`
                schedule.build(d)  # type: ignore[arg-type]  # the primitives it calls are here
            thinking = time.perf_counter() - start if policy is not None else 0.0
            accepted, tested = d.verify(policy)
            verify = costs.verify_seconds(d.size())
            if policy is not None:  # as decoding times a step's verify: forward, verifier, commit
                policy.observe_step(tested, d.size(), verify + costs.step_overhead, d.charged)
            for node in [0, *accepted]:  # what the target predicted on the accepted path
                row = min(d.index[node] + 1, n - 1)
                recycler.successors[d.tokens[node]] = (rec.target[0][row], rec.target[1][row])
            new = [d.tokens[node] for node in accepted]
            bonus = d.index[accepted[-1] if accepted else 0] + 1
            for token in new + rec.answer[bonus : bonus + 1]:
                pld.append(token)
            committed += len(new) + 1
            speculative = schedule is not None or policy is not None
            overhead = d.bookkeeping + thinking + speculative * costs.step_overhead
            step = verify + d.seconds() + overhead
            seconds += step
            out.steps += 1
            kind = out.kinds.setdefault(d.kind(), StepKind())
            kind.steps += 1
            kind.tokens += len(new) + 1
            kind.seconds += step
            kind.overhead_seconds += overhead
            kind.naive_seconds += (len(new) + 1) * costs.verify_seconds(1)
        out.seconds[rec.category] = out.seconds.get(rec.category, 0.0) + seconds
        out.tokens[rec.category] = out.tokens.get(rec.category, 0) + n - 1
    return out


def question_orders(records: Sequence[Recorded], n: int) -> list[list[Recorded]]:
    """`n` orders of the questions: as recorded, then shuffles seeded 1, 2, ... A policy carried
    across questions decides by the path its estimates took, so one order is one draw of what
    it does: a gain seen in one order alone can be chance."""
    if n < 1:
        raise ValueError(f"question_orders: n must be at least 1, got {n}")
    shuffles = [random.Random(seed).sample(list(records), len(records)) for seed in range(1, n)]
    return [list(records), *shuffles]


def hindsight(
    rec: Recorded, costs: Costs, lookup: PromptLookupConfig | None = None
) -> tuple[float, dict[str, int]]:
    """The least seconds in which any schedule of chains could decode `rec` if it knew the
    answer, and its steps by kind (``plain``, ``pld``, a level's name, ``pld+`` a level's name).

    A shortest path over answer positions: from each, either one plain forward, or one chain (up
    to 16 tokens of prompt lookup's proposal, or a level's greedy tokens, or lookup's and then a
    level's) cut exactly before its first rejected token, verified by the cheapest forward of at
    least its size (a tree padded with rejected nodes costs that much or more), with the same
    costs and overheads as `replay`. Every fixed schedule of chains (``pld:K`` for K <= 16,
    ``chain:K``, ``pld-or-chain:K``) takes at least this long on the same record; how far a
    policy is from it is what not knowing the answer costs that policy."""
    n, top = len(rec.answer), max(costs.verify)
    pld = PromptLookup([*rec.prompt, rec.answer[0]], lookup or PromptLookupConfig(max_proposal=16))
    proposals: list[list[int]] = [[] for _ in range(n)]  # [p]: the proposal after answer[:p]
    for p in range(1, n):
        proposals[p] = pld.propose()
        pld.append(rec.answer[p])
    padded = {
        t: min(costs.verify_seconds(u) for u in range(t, max(t, top) + 1)) for t in range(1, n + 1)
    }

    def agreeing(tokens: Sequence[int], start: int) -> int:
        """How many of `tokens`, placed from answer index `start` on, are the answer's."""
        count = 0
        while (
            count < len(tokens) and start + count < n and tokens[count] == rec.answer[start + count]
        ):
            count += 1
        return count

    greedy = {level: [row[0] for row in ids] for level, (ids, _) in rec.drafts.items()}
    best: list[tuple[float, str, int]] = [(0.0, "", 0)] * (n + 1)  # (seconds to the end, step)
    for p in range(n - 1, 0, -1):
        room = n - p - 1  # the last step's bonus token is the answer's last
        options = [(padded[1] + best[p + 1][0], "plain", 0)]
        looked = min(agreeing(proposals[p], p), room)
        step, lookup_s = costs.step_overhead, costs.lookup_overhead
        for j in range(1, looked + 1):
            options.append((lookup_s + padded[j + 1] + step + best[p + j + 1][0], PLD, j))
        for level, tokens in greedy.items():
            call = costs.draft[level] + costs.draft_overhead
            for j in range(0, looked + 1):  # j lookup tokens first, then the level's
                right = min(agreeing(tokens[p + j :], p + j), room - j)
                first = lookup_s if j else 0.0
                for k in range(1, right + 1):
                    seconds = first + k * call + padded[j + k + 1] + step + best[p + j + k + 1][0]
                    options.append((seconds, f"{PLD}+{level}" if j else level, j + k))
        best[p] = min(options)
    kinds: dict[str, int] = {}
    p = 1
    while p < n:
        _, kind, drafted = best[p]
        kinds[kind] = kinds.get(kind, 0) + 1
        p += drafted + 1
    return best[1][0], kinds
