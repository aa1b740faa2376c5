"""DSIA plans on tiny models: identity exactness, skipped sub-layers never run, early exit through
the shared head, scratch KV isolation, DraftRunner reuse, teacher-forced scoring, bad plans."""

from __future__ import annotations

import copy

import pytest
import torch

from casspec_ref.accel.int8 import Int8Kernel
from casspec_ref.base.kernels import exact_linear
from casspec_ref.config import ModelConfig, smollm2_135m, tiny_gpt2, tiny_llama
from casspec_ref.dsia.act_quant import QuantKernel, quant_plan
from casspec_ref.dsia.compose import mix, replace, scale
from casspec_ref.dsia.early_exit import early_exit_plan
from casspec_ref.dsia.layer_sparsity import (
    alternate_skip_plan,
    ranked_skip_plan,
    skip_layers_plan,
    sparsity,
    sublayer_plan,
)
from casspec_ref.dsia.precision import precision_plan
from casspec_ref.dsia.virtual_draft import DraftRunner
from casspec_ref.io.presets import seed_hierarchy
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.tools.teacher_forced import TeacherForced

CONFIGS = {"llama": tiny_llama(n_layers=4), "gpt2": tiny_gpt2(n_layers=4)}


def make_model(config: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(config).double()
    with torch.no_grad():
        for p in model.parameters():  # larger weights than the default init: sharper logits
            p.normal_(0.0, 0.3)
    # Plans are compared with the target and with edited copies bit for bit: every forward in
    # the plain forms, which a draft runs (the target's own form is tested elsewhere).
    model.shape_invariant = False
    return model


def run(model: Transformer, tokens: list[int], plan: ExecutionPlan | None) -> torch.Tensor:
    t = torch.tensor([tokens])
    return model.forward(t, torch.arange(len(tokens))[None], plan=plan)[0]  # (T, V)


class CountingKernel:
    """A LinearKernel that records every call and computes the exact product."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.head_weights: list[int] = []

    def __call__(self, x, weight, bias, layer, name):  # type: ignore[no-untyped-def]
        self.calls.append((layer, name))
        if name == "head":
            self.head_weights.append(weight.data_ptr())
        return exact_linear(x, weight, bias)


TOKENS = [3, 17, 5, 9, 22, 4, 11, 8]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_identity_plans_are_exact(family: str) -> None:
    cfg = CONFIGS[family]
    model = make_model(cfg)
    target = run(model, TOKENS, None)
    identities = [
        ExecutionPlan(),
        sublayer_plan(cfg, []),
        mix(ExecutionPlan(), sublayer_plan(cfg, [])),
        early_exit_plan(cfg, cfg.n_layers),
        quant_plan(8, exclude=set(QuantKernel().names)),  # a kernel that quantizes nothing
        precision_plan(torch.float64),
        ExecutionPlan(linear=CountingKernel()),
    ]
    for plan in identities:
        assert torch.equal(run(model, TOKENS, plan), target), plan.name


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_skipped_sublayers_never_execute_and_equal_zeroed_outputs(family: str) -> None:
    cfg = CONFIGS[family]
    model = make_model(cfg)
    out_name = "proj" if family == "gpt2" else "down"
    counter = CountingKernel()
    plan = mix(
        sublayer_plan(cfg, [(1, "attn"), (2, "mlp")]), ExecutionPlan(linear=counter), name="t"
    )
    logits = run(model, TOKENS, plan)
    attn_names = {"attn_q", "attn_k", "attn_v", "attn_o"}
    assert not [c for c in counter.calls if c[0] == 1 and c[1] in attn_names]
    assert not [c for c in counter.calls if c[0] == 2 and c[1].startswith("mlp")]
    assert [c for c in counter.calls if c[0] == 2 and c[1] in attn_names]  # the rest still runs
    # Oracle by another path: a sub-layer whose output projection (and bias) is zero adds
    # exactly 0.0 to the residual stream, so zeroing it equals skipping it (float64, bit-exact).
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for mod in (zeroed.layers[1].attn.o, getattr(zeroed.layers[2].mlp, out_name)):
            mod.weight.zero_()
            if mod.bias is not None:
                mod.bias.zero_()
    assert torch.equal(logits, run(zeroed, TOKENS, None))
    assert not torch.equal(logits, run(model, TOKENS, None))


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_early_exit_uses_the_shared_head(family: str) -> None:
    cfg = CONFIGS[family]
    model = make_model(cfg)
    counter = CountingKernel()
    plan = mix(early_exit_plan(cfg, 2), ExecutionPlan(linear=counter))
    logits = run(model, TOKENS, plan)
    assert max(layer for layer, _ in counter.calls) == 1
    assert counter.calls.count((-1, "head")) == 1
    full = CountingKernel()
    run(model, TOKENS, ExecutionPlan(linear=full))
    assert counter.head_weights == full.head_weights  # the very same head tensor, no copy
    zeroed = copy.deepcopy(model)
    out_name = "proj" if family == "gpt2" else "down"
    with torch.no_grad():
        for i in (2, 3):
            for mod in (zeroed.layers[i].attn.o, getattr(zeroed.layers[i].mlp, out_name)):
                mod.weight.zero_()
                if mod.bias is not None:
                    mod.bias.zero_()
    assert torch.equal(logits, run(zeroed, TOKENS, None))


def test_bad_plans_get_clear_errors() -> None:
    cfg = CONFIGS["llama"]
    with pytest.raises(ValueError, match="out of range"):
        sublayer_plan(cfg, [(4, "attn")])
    with pytest.raises(ValueError, match="out of range"):
        skip_layers_plan(cfg, [-1])
    with pytest.raises(ValueError, match="allowed are 'attn' and 'mlp'"):
        sublayer_plan(cfg, [(1, "ffn")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="exit_after"):
        early_exit_plan(cfg, 5)
    with pytest.raises(ValueError, match="exit_after"):
        early_exit_plan(cfg, 0)
    with pytest.raises(ValueError, match="allowed bit widths"):
        quant_plan(bits=2)
    with pytest.raises(ValueError, match="not supported"):
        precision_plan(torch.int8)
    with pytest.raises(ValueError, match="within"):
        alternate_skip_plan(cfg, 1.5)
    with pytest.raises(ValueError, match="skippable"):
        ranked_skip_plan(cfg, [(1, "attn")], 0.5)
    with pytest.raises(ValueError, match="linear kernels"):
        mix(quant_plan(8), quant_plan(4))
    with pytest.raises(ValueError, match="compute dtypes"):
        mix(precision_plan(torch.bfloat16), precision_plan(torch.float16))
    with pytest.raises(ValueError, match="unknown ExecutionPlan fields"):
        replace(ExecutionPlan(), skip_ffn=frozenset())
    model = make_model(cfg)
    with pytest.raises(ValueError, match="out of range"):
        DraftRunner(model, KVCache(cfg, 16, torch.float64)).logits(
            ExecutionPlan(skip_mlp=frozenset({9})), [1]
        )


def test_composition_and_seed_hierarchy() -> None:
    cfg = smollm2_135m()
    levels = scale(lambda r: alternate_skip_plan(cfg, r), (0.2, 0.4))
    assert [round(sparsity(p, cfg), 2) for p in levels] == [0.2, 0.4]
    ranking = tuple((i, k) for i in range(2, 28) for k in ("mlp", "attn"))
    nested = scale(lambda r: ranked_skip_plan(cfg, ranking, r), (0.2, 0.4))
    assert nested[0].skip_attention <= nested[1].skip_attention
    assert nested[0].skip_mlp <= nested[1].skip_mlp
    for rank in (None, ranking):
        h = seed_hierarchy(cfg, ranking=rank)
        l1, l2, l3 = h.levels
        assert l1.exit_after is not None and abs(sparsity(l1, cfg) - 0.7) < 0.04
        assert abs(sparsity(l2, cfg) - 0.3) < 0.04 and l2.linear is not None
        assert sparsity(l3, cfg) == 0.0 and l3.linear is l2.linear  # one kernel, shared
    int8 = seed_hierarchy(cfg, ranking=ranking, int8=True).levels
    assert isinstance(int8[2].linear, Int8Kernel) and int8[2].linear is int8[1].linear
    with pytest.raises(ValueError, match="bits=8"):
        seed_hierarchy(cfg, bits=4, int8=True)
    plan = replace(mix(levels[0], quant_plan(8)), linear=None, name="no-quant")
    assert plan.linear is None and plan.skip_mlp == levels[0].skip_mlp


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_draft_runner_scratch_never_leaks_and_reuses_prefixes(family: str) -> None:
    cfg = CONFIGS[family]
    model = make_model(cfg)
    cache = KVCache(cfg, 32, torch.float64)
    prefix = TOKENS[:6]
    model.forward(torch.tensor([prefix]), torch.arange(6)[None], cache=cache)
    k0, v0, n0 = cache.k[:, :, :, :6].clone(), cache.v[:, :, :, :6].clone(), cache.length
    plans = [
        skip_layers_plan(cfg, [1]),
        quant_plan(4, group_size=8),
        mix(early_exit_plan(cfg, 3), sublayer_plan(cfg, [(0, "mlp")])),
    ]
    runner = DraftRunner(model, cache)
    root = TOKENS[6]
    paths = [[root, 5, 9, 2], [root, 5, 9], [root, 5, 7], [root, 5, 7, 1, 3]]
    for plan in plans:
        for path in paths:
            got = runner.logits(plan, path)
            # Oracle: a fresh forward of the whole path on a copy of the verified cache.
            ref_cache = cache.clone()
            ref_cache.truncate(6)
            ref = model.forward(
                torch.tensor([path]),
                torch.arange(6, 6 + len(path))[None],
                cache=ref_cache,
                plan=plan,
            )[0]
            assert got.shape == (len(path), cfg.vocab_size)
            assert torch.allclose(got, ref, rtol=1e-10, atol=1e-10)
    # Per plan: 4 tokens, then nothing (a prefix), then [7] (a branch), then [1, 3].
    assert runner.forwards == 3 * 3
    assert runner.tokens_fed == 3 * (4 + 1 + 2)
    runner.release()
    assert cache.length == n0
    assert torch.equal(cache.k[:, :, :, :6], k0) and torch.equal(cache.v[:, :, :, :6], v0)
    with pytest.raises(ValueError, match="non-empty"):
        runner.logits(plans[0], [])


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_teacher_forced_equals_one_token_drafts_on_the_target_cache(family: str) -> None:
    cfg = CONFIGS[family]
    model = make_model(cfg)
    seq = TOKENS + [1, 30, 7, 2]
    first = 5
    tf = TeacherForced(model, seq, first)
    assert tf.width == len(seq) - first
    target = run(model, seq[:-1], None)[first - 1 :]
    assert torch.allclose(tf.target_logits, target, atol=1e-10)
    for plan in (skip_layers_plan(cfg, [2]), mix(early_exit_plan(cfg, 3), quant_plan(8))):
        batched = tf.draft_logits(plan)
        for i, pos in enumerate(range(first - 1, len(seq) - 1)):
            cache = KVCache(cfg, 32, torch.float64)
            model.forward(torch.tensor([seq[:pos]]), torch.arange(pos)[None], cache=cache)
            one = DraftRunner(model, cache).logits(plan, [seq[pos]])[0]
            assert torch.allclose(batched[i], one, rtol=1e-9, atol=1e-9)
    assert tf.matchness(ExecutionPlan()) == tf.target_agreement()
    with pytest.raises(ValueError, match="first"):
        TeacherForced(model, seq, 0)


def test_smollm2_presets_are_valid_and_nested() -> None:
    from casspec_ref.io.presets import (
        SMOLLM2_RANKING,
        smollm2_cascade,
        smollm2_drafts,
        smollm2_seed_hierarchy,
    )

    cfg = smollm2_135m()
    assert len(set(SMOLLM2_RANKING)) == len(SMOLLM2_RANKING) == 56
    assert all(layer not in (0, 29) for layer, _ in SMOLLM2_RANKING)
    drafts = smollm2_drafts(cfg)
    assert drafts["search-4sub"].skip_attention <= drafts["search-10sub"].skip_attention
    assert drafts["search-10sub+bf16"].compute_dtype == torch.bfloat16
    smollm2_seed_hierarchy(cfg).validate(cfg)
    low, high = smollm2_cascade(cfg).levels
    assert low.linear is high.linear  # one shared int8 kernel: one int8 weight copy
    assert abs(sparsity(low, cfg) - 0.3) < 0.02 and sparsity(high, cfg) == 0.0
    with pytest.raises(ValueError, match="30 blocks"):
        smollm2_drafts(tiny_llama())
