"""On-the-fly layer-set search in the style of SWIFT, at sub-layer granularity, cached as JSON.

Scope: docs/method.md §2 ("SWIFT chooses the skipped sub-layers on the fly ... matchness").
Matchness of a plan = fraction of recent positions where its argmax equals the token actually
generated, measured with `TeacherForced` (the draft reads the target's K/V, as it will in the
speculative loop).

Our procedure (a deviation from SWIFT, which uses random proposals plus a Bayesian-optimisation
proposal every 25th iteration):
1. score every unprotected sub-layer alone (one evaluation each);
2. greedy growth to ``round(sparsity * 2 * n_layers)`` units: at each step try the ``beam``
   best-scoring remaining units and keep the one with the highest matchness; the order of
   additions is the *ranking*, so `ranked_skip_plan` can scale it to nested sets;
3. random local refinement: swap one skipped unit for an unskipped one (drawn with a bias to
   good single scores), keep the swap when matchness does not drop, stop at ``stop_matchness``,
   after ``max_iters`` or after ``patience`` iterations without a strict gain.
Deterministic given ``seed``. The result is cacheable per (model, prompt domain, sparsity) with
`save_search` / `load_search` (plain JSON, no pickle).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from casspec_ref.dsia.layer_sparsity import SubLayer, sublayer_plan
from casspec_ref.tools.teacher_forced import TeacherForced

if TYPE_CHECKING:
    from casspec_ref.model import Transformer


@dataclass(frozen=True)
class SearchConfig:
    """Parameters of `search_layers` (see the module docstring)."""

    sparsity: float = 0.3
    protect: tuple[int, ...] = (0, -1)  # blocks never skipped; negative = from the end
    beam: int = 6
    max_iters: int = 60
    patience: int = 30
    stop_matchness: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.sparsity < 1.0:
            raise ValueError(f"SearchConfig.sparsity={self.sparsity}: allowed is (0, 1)")
        if self.beam < 1 or self.max_iters < 0 or self.patience < 1:
            raise ValueError("SearchConfig needs beam >= 1, max_iters >= 0 and patience >= 1")


@dataclass(frozen=True)
class SearchResult:
    """What a search found; JSON-serialisable.

    Attributes:
        model, domain: the cache key (model name and prompt domain).
        sparsity: the target fraction of sub-layers skipped.
        ranking: units in greedy order (cheapest first), then the rest by single-unit score.
        skip: the best set found after refinement.
        matchness: its matchness on the search trajectories.
        evaluations: number of plan evaluations spent.
    """

    model: str
    domain: str
    sparsity: float
    ranking: tuple[SubLayer, ...]
    skip: tuple[SubLayer, ...]
    matchness: float
    evaluations: int


def _mean_matchness(scorers: list[TeacherForced], plan_units: tuple[SubLayer, ...]) -> float:
    plan = sublayer_plan(scorers[0].model.config, plan_units, name="search")
    total = sum(s.matchness(plan) * s.width for s in scorers)
    return total / sum(s.width for s in scorers)


def search_layers(
    model: Transformer,
    scorers: list[TeacherForced],
    config: SearchConfig | None = None,
    model_name: str = "model",
    domain: str = "mixed",
) -> SearchResult:
    """Search a set of sub-layers to skip; see the module docstring for the procedure."""
    cfg = config if config is not None else SearchConfig()
    if not scorers:
        raise ValueError("search_layers needs at least one TeacherForced trajectory")
    n = model.config.n_layers
    protected = {p % n for p in cfg.protect}
    units: list[SubLayer] = [
        (i, kind) for i in range(n) if i not in protected for kind in ("attn", "mlp")
    ]
    k = round(cfg.sparsity * 2 * n)
    if k > len(units):
        raise ValueError(f"sparsity {cfg.sparsity} needs {k} units, only {len(units)} skippable")
    evaluations = 0

    def score(chosen: tuple[SubLayer, ...]) -> float:
        nonlocal evaluations
        evaluations += 1
        return _mean_matchness(scorers, chosen)

    single = {u: score((u,)) for u in units}
    by_single = sorted(units, key=lambda u: -single[u])
    chosen: list[SubLayer] = []
    current = 1.0
    while len(chosen) < k:
        pool = [u for u in by_single if u not in chosen][: cfg.beam]
        trials = {u: score(tuple(chosen + [u])) for u in pool}
        best = max(pool, key=lambda u: trials[u])
        chosen.append(best)
        current = trials[best]
    ranking = tuple(chosen) + tuple(u for u in by_single if u not in chosen)

    rng = random.Random(cfg.seed)
    skip = list(chosen)
    stale = 0
    for _ in range(cfg.max_iters):
        if current >= cfg.stop_matchness or stale >= cfg.patience:
            break
        rest = [u for u in by_single if u not in skip]
        # Bias towards good single scores: the first quarter of the rest half of the time.
        out_unit = rng.choice(skip)
        in_unit = rng.choice(rest[: max(1, len(rest) // 4)] if rng.random() < 0.5 else rest)
        trial = [u for u in skip if u != out_unit] + [in_unit]
        value = score(tuple(trial))
        stale = 0 if value > current else stale + 1
        if value >= current:
            skip, current = trial, value
    return SearchResult(
        model=model_name,
        domain=domain,
        sparsity=cfg.sparsity,
        ranking=ranking,
        skip=tuple(sorted(skip)),
        matchness=current,
        evaluations=evaluations,
    )


def save_search(result: SearchResult, path: str | Path) -> None:
    """Write ``result`` as JSON (creating parent folders)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=1) + "\n")


def load_search(path: str | Path) -> SearchResult:
    """Read a `SearchResult` written by `save_search`; raises `ValueError` on a malformed file."""
    raw = json.loads(Path(path).read_text())
    try:
        units = {
            key: tuple((int(i), str(kind)) for i, kind in raw[key]) for key in ("ranking", "skip")
        }
        for key in ("ranking", "skip"):
            for _, kind in units[key]:
                if kind not in ("attn", "mlp"):
                    raise ValueError(f"sub-layer kind {kind!r}")
        return SearchResult(
            model=str(raw["model"]),
            domain=str(raw["domain"]),
            sparsity=float(raw["sparsity"]),
            ranking=units["ranking"],  # type: ignore[arg-type]  # kinds checked above
            skip=units["skip"],  # type: ignore[arg-type]
            matchness=float(raw["matchness"]),
            evaluations=int(raw["evaluations"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path} is not a layer-search result: {err}") from err


def search_cache_path(folder: str | Path, model_name: str, domain: str, sparsity: float) -> Path:
    """Where the result for (model, domain, sparsity) is cached under ``folder``."""
    return Path(folder) / f"{model_name}__{domain}__s{sparsity:.2f}.json"
