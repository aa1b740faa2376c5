"""SWIFT-style layer search on a tiny model: valid, deterministic, cached as JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from casspec_ref.config import tiny_llama
from casspec_ref.dsia.layer_sparsity import sublayer_plan
from casspec_ref.model import Transformer
from casspec_ref.tools.layer_search import (
    SearchConfig,
    load_search,
    save_search,
    search_cache_path,
    search_layers,
)
from casspec_ref.tools.teacher_forced import TeacherForced


def _setup() -> tuple[Transformer, list[TeacherForced]]:
    cfg = tiny_llama(n_layers=4)
    torch.manual_seed(1)
    model = Transformer(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    seq = [5, 9, 3, 22, 7, 1, 30, 12, 8, 4, 19, 2, 6, 27]
    # Score against the target's own argmax continuation, as for a greedy trajectory.
    tf0 = TeacherForced(model, seq, 1)
    greedy = seq[:1] + tf0.target_logits.argmax(-1).tolist()
    return model, [TeacherForced(model, greedy, 4)]


def test_search_finds_a_valid_nested_ranking_and_is_deterministic(tmp_path: Path) -> None:
    model, scorers = _setup()
    cfg = SearchConfig(sparsity=0.25, beam=3, max_iters=10, patience=5, seed=3)
    result = search_layers(model, scorers, cfg, model_name="tiny", domain="test")
    assert len(result.skip) == 2 and len(set(result.skip)) == 2
    assert all(layer not in (0, 3) for layer, _ in result.ranking)  # protected first/last
    assert len(result.ranking) == 2 * 2  # every unprotected unit, each once
    plan = sublayer_plan(model.config, result.skip)
    assert result.matchness == pytest.approx(scorers[0].matchness(plan))
    again = search_layers(model, scorers, cfg, model_name="tiny", domain="test")
    assert again == result
    path = search_cache_path(tmp_path, "tiny", "test", 0.25)
    save_search(result, path)
    assert load_search(path) == result
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "x"}))
    with pytest.raises(ValueError, match="not a layer-search result"):
        load_search(bad)


def test_search_rejects_bad_requests() -> None:
    model, scorers = _setup()
    with pytest.raises(ValueError, match="sparsity"):
        SearchConfig(sparsity=1.0)
    with pytest.raises(ValueError, match="units"):
        search_layers(model, scorers, SearchConfig(sparsity=0.9))
    with pytest.raises(ValueError, match="at least one"):
        search_layers(model, [], SearchConfig())
