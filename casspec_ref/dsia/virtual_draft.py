"""Virtual draft models: run the target under a DSIA plan on scratch rows of its own KV cache.

Scope: docs/method.md §2 ("Draft KV"): a draft reads the target's KV for verified tokens; what it
writes for unverified tokens is scratch, discarded after the step. Every draft is the same
`Transformer` object run with another `ExecutionPlan`, so drafts add no weight copies.

`DraftRunner` is how every model draft runs during one speculative step:
- at construction it remembers ``base = cache.length`` (the verified length);
- ``logits(plan, path_tokens)`` feeds ``path_tokens`` (the root, i.e. the last committed token,
  not in the cache yet, then drafted tokens along one tree path) at positions ``base ..`` as
  scratch rows ``[base, base + len(path))``, and returns one row of logits per path token;
- it keeps the scratch tokens it fed, the plan that owns them and their logits, so a call with
  the same plan and a path extending (or repeating a prefix of) what was fed only runs the new
  suffix; another plan or another branch re-feeds from the first difference (another plan:
  from the root, because its executed layers differ and its scratch K/V is not reusable);
- ``release()`` truncates the cache back to ``base``.

Choice: recomputing a short unverified path instead of sharing scratch K/V between plans
(docs/method.md §2 names it "the simple fix"). Scratch rows of a skipped attention sub-layer are
never written, and never read by the plan that skipped it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from casspec_ref.plan import ExecutionPlan

if TYPE_CHECKING:
    from casspec_ref.kv_cache import KVCache
    from casspec_ref.model import Transformer


class DraftRunner:
    """Runs draft plans over one step's unverified paths, on scratch rows of the target cache.

    Counters: ``forwards`` (model forwards run), ``tokens_fed`` (tokens those forwards fed),
    ``reused`` (path tokens answered from stored logits without a forward).
    """

    def __init__(self, model: Transformer, cache: KVCache) -> None:
        self.model = model
        self.cache = cache
        self.base = cache.length
        self._plan: ExecutionPlan | None = None
        self._fed: list[int] = []
        self._rows: list[torch.Tensor] = []  # one (V,) logits row per fed token
        self.forwards = 0
        self.tokens_fed = 0
        self.reused = 0

    def logits(self, plan: ExecutionPlan, path_tokens: Sequence[int]) -> torch.Tensor:
        """Logits ``(len(path_tokens), V)`` of ``plan`` along ``path_tokens`` after the prefix."""
        path = [int(t) for t in path_tokens]
        if not path:
            raise ValueError("DraftRunner.logits needs a non-empty path (at least the root token)")
        if self.cache.length < self.base:
            raise ValueError(
                f"DraftRunner: the cache was truncated below the verified length {self.base} "
                f"(length {self.cache.length}); create a new runner for a new step"
            )
        plan.validate(self.model.config)
        same = 0
        if self._plan == plan:
            limit = min(len(path), len(self._fed))
            while same < limit and self._fed[same] == path[same]:
                same += 1
        else:
            self._plan, self._fed, self._rows = plan, [], []
        self.reused += same
        if same < len(path):
            # Drop scratch rows from the first difference, then feed the rest of the path.
            self.cache.truncate(self.base + same)
            del self._fed[same:], self._rows[same:]
            new = path[same:]
            start = self.base + same
            tokens = torch.tensor([new], dtype=torch.long)  # (1, T)
            positions = torch.arange(start, start + len(new), dtype=torch.long)[None]  # (1, T)
            with torch.no_grad():
                out = self.model.forward(tokens, positions, cache=self.cache, plan=plan)  # (1,T,V)
            self.forwards += 1
            self.tokens_fed += len(new)
            self._fed.extend(new)
            self._rows.extend(out[0].unbind(0))
        return torch.stack(self._rows[: len(path)])  # (len(path), V)

    def release(self) -> None:
        """Discard all scratch rows: the cache goes back to the verified length ``base``."""
        if self.cache.length > self.base:
            self.cache.truncate(self.base)
        self._plan, self._fed, self._rows = None, [], []
