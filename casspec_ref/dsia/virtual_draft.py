"""Virtual draft models (docs/method.md §2, "Draft KV"): a draft, the target under a DSIA plan,
reads the target's K/V of the verified tokens and writes its own for the unverified path to
scratch rows of the same cache, discarded after the step. See docs/dsia.md."""

from collections.abc import Sequence

import torch

from casspec_ref.base.dsia_checks import check_draft_call
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan


class DraftRunner:
    """One step's draft forwards on scratch rows ``[base, ..)``, re-feeding only new suffixes."""

    def __init__(self, model: Transformer, cache: KVCache) -> None:
        self.model = model
        self.cache = cache
        self.base = cache.length
        self._plan: ExecutionPlan | None = None
        self._fed: list[int] = []
        self._rows: list[torch.Tensor] = []  # one (V,) logits row per fed token
        self.forwards = 0  # model forwards run
        self.tokens_fed = 0  # tokens those forwards fed

    def logits(self, plan: ExecutionPlan, path_tokens: Sequence[int]) -> torch.Tensor:
        """Logits ``(len(path_tokens), V)`` of ``plan`` along ``path_tokens`` (the root, i.e. the
        last committed token, then drafted tokens), fed at positions ``base ..``."""
        path = [int(t) for t in path_tokens]
        check_draft_call(path, self.cache.length, self.base)
        plan.validate(self.model.config)
        if self._plan != plan:
            self._plan, self._fed, self._rows = plan, [], []
        limit = min(len(path), len(self._fed))
        same = 0
        while same < limit and self._fed[same] == path[same]:
            same += 1
        if same < len(path):
            # Drop scratch rows from the first difference, then feed the rest at base + same ..
            self.cache.truncate(self.base + same)
            del self._fed[same:], self._rows[same:]
            new = path[same:]
            tokens = torch.tensor([new], dtype=torch.long, device=self.cache.k.device)  # (1, T)
            out = self.model(tokens, cache=self.cache, plan=plan)  # (1, T, V)
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
