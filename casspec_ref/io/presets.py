"""Per-checkpoint DSIA draft presets, chosen when a checkpoint is loaded, and named hierarchies.

The loader (`casspec_ref.io.weights.load_model`) calls `attach_preset_drafts` with the
checkpoint's name; a checkpoint this module knows gets its measured hierarchy as
``model.preset_drafts``, which `casspec_ref.speculative.default_drafts` then uses. Any other
model gets the core's generic hierarchy: what was measured on one checkpoint lives here, not in
the core. Every preset is a function of the model config, so it validates against the model it
runs on. `seed_hierarchy` builds the seed article's example hierarchy for any config. The
presets' 8-bit levels use the real int8 kernel (`casspec_ref.accel.int8`).

`SMOLLM2_RANKING` is the sub-layer order found by `layer_search.search_layers` (greedy growth to
24 units, beam 6, no refinement) on two calibration prompts that are *not* in the evaluation set;
its JSON record is docs/layer_search/smollm2-135m__mixed__s0.40.json (``benchmarks/dsia_table.py
--research`` recomputes it). Attention sub-layers dominate the cheap end of the ranking; they
save less time than MLPs, which is why deep sparsity buys little c on this model.
See docs/dsia.md for the numbers behind each choice.
"""

from __future__ import annotations

import dataclasses

import torch

from casspec_ref.accel.int8 import int8_plan
from casspec_ref.config import ModelConfig
from casspec_ref.dsia.act_quant import quant_plan
from casspec_ref.dsia.compose import Hierarchy, mix, replace
from casspec_ref.dsia.early_exit import exit_for_fraction
from casspec_ref.dsia.layer_sparsity import SubLayer, alternate_skip_plan, ranked_skip_plan
from casspec_ref.dsia.precision import precision_plan
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan

#: Cheapest-to-skip sub-layers of SmolLM2-135M first (protected blocks 0 and 29 excluded).
SMOLLM2_RANKING: tuple[SubLayer, ...] = (
    (5, "attn"),
    (6, "attn"),
    (7, "attn"),
    (9, "attn"),
    (7, "mlp"),
    (17, "attn"),
    (8, "attn"),
    (12, "attn"),
    (4, "attn"),
    (25, "attn"),
    (1, "mlp"),
    (6, "mlp"),
    (9, "mlp"),
    (4, "mlp"),
    (13, "mlp"),
    (11, "mlp"),
    (3, "attn"),
    (14, "attn"),
    (11, "attn"),
    (10, "attn"),
    (12, "mlp"),
    (10, "mlp"),
    (2, "mlp"),
    (16, "attn"),
    (2, "attn"),
    (14, "mlp"),
    (15, "attn"),
    (27, "attn"),
    (15, "mlp"),
    (18, "attn"),
    (20, "attn"),
    (3, "mlp"),
    (13, "attn"),
    (5, "mlp"),
    (16, "mlp"),
    (19, "attn"),
    (22, "attn"),
    (21, "attn"),
    (21, "mlp"),
    (26, "attn"),
    (28, "attn"),
    (8, "mlp"),
    (22, "mlp"),
    (17, "mlp"),
    (18, "mlp"),
    (23, "attn"),
    (24, "mlp"),
    (27, "mlp"),
    (19, "mlp"),
    (26, "mlp"),
    (23, "mlp"),
    (24, "attn"),
    (20, "mlp"),
    (25, "mlp"),
    (28, "mlp"),
    (1, "attn"),
)


def smollm2_drafts(config: ModelConfig) -> dict[str, ExecutionPlan]:
    """The DSIA drafts measured in docs/dsia.md, by name (every one validated on ``config``)."""
    if config.n_layers != 30:
        raise ValueError(
            f"smollm2_drafts is tuned for SmolLM2-135M's 30 blocks, got n_layers={config.n_layers}"
        )
    bf16 = precision_plan(torch.bfloat16)
    w8a8 = int8_plan()
    skip10 = ranked_skip_plan(config, SMOLLM2_RANKING, 10 / 60, name="search-10sub")
    drafts = {
        "bf16": bf16,
        "w8a8-fast": w8a8,
        "w8a8-fast-no_down": int8_plan(exclude={"mlp_down"}),
        "search-4sub": ranked_skip_plan(config, SMOLLM2_RANKING, 4 / 60, name="search-4sub"),
        "search-10sub": skip10,
        "search-0.2": ranked_skip_plan(config, SMOLLM2_RANKING, 0.2, name="search-0.2"),
        "search-0.3": ranked_skip_plan(config, SMOLLM2_RANKING, 0.3, name="search-0.3"),
        "search-10sub+bf16": mix(skip10, bf16, name="search-10sub+bf16"),
        "search-10sub+w8a8-fast": mix(skip10, w8a8, name="search-10sub+w8a8-fast"),
        "search-0.3+w8a8-fast": mix(
            ranked_skip_plan(config, SMOLLM2_RANKING, 0.3), w8a8, name="search-0.3+w8a8-fast"
        ),
    }
    for plan in drafts.values():
        plan.validate(config)
    return drafts


def smollm2_cascade(config: ModelConfig) -> Hierarchy:
    """The two model levels recommended for CAS-Spec on SmolLM2 (CPU), cheapest first.

    Measured in docs/dsia.md (fp32 target, 6 prompts, CPU): ``search-0.3+w8a8-fast`` alpha
    ~0.65 at c ~0.49 and ``w8a8-fast`` alpha ~0.93 at c ~0.63; PLD (alpha ~0.22, c ~0) goes
    below them. Both levels share one int8 weight copy (one `Int8Kernel`).
    """
    drafts = smollm2_drafts(config)
    hierarchy = Hierarchy("smollm2-cpu", (drafts["search-0.3+w8a8-fast"], drafts["w8a8-fast"]))
    hierarchy.validate(config)
    return hierarchy


def seed_hierarchy(
    config: ModelConfig,
    ranking: tuple[SubLayer, ...] | None = None,
    l1_sparsity: float = 0.7,
    l1_exit_fraction: float = 0.85,
    l2_sparsity: float = 0.3,
    bits: int = 8,
    int8: bool = False,
) -> Hierarchy:
    """The seed article's hierarchy as configuration.

    L1 = ``l1_sparsity`` of the sub-layers not run, part of it by exiting after
    ``l1_exit_fraction`` of the blocks and the rest by skipping inside them; L2 = ``l2_sparsity``
    + ``bits``-bit activations; L3 = ``bits``-bit activations only. With a ``ranking`` (from
    `layer_search`) the skipped sub-layers are the cheapest ones; otherwise evenly spaced blocks.
    The article does not say how L1 splits its 70% between exit and skips: ``l1_exit_fraction``
    is our parameter. ``int8=True`` (needs ``bits=8``) quantizes the weights too and runs the
    real int8 kernel (`int8_plan`); otherwise the readable activation-only fake quantization.
    """
    if int8 and bits != 8:
        raise ValueError(f"seed_hierarchy(int8=True) needs bits=8, got bits={bits}")
    exit_after = exit_for_fraction(config, l1_exit_fraction)
    # Sub-layers still to skip inside the kept blocks so that the total reaches l1_sparsity.
    cut = 2 * (config.n_layers - exit_after)
    inner = max(0.0, l1_sparsity - cut / (2 * config.n_layers))
    if ranking is not None:
        inside = tuple(u for u in ranking if u[0] < exit_after)
        l1_skip = ranked_skip_plan(config, inside, inner)
        l2_skip = ranked_skip_plan(config, ranking, l2_sparsity)
    else:
        # Evenly spaced whole blocks, as a fraction of the model's blocks.
        l1_skip = alternate_skip_plan(
            dataclasses.replace(config, n_layers=exit_after),
            inner * config.n_layers / exit_after,
        )
        l2_skip = alternate_skip_plan(config, l2_sparsity)
    q = int8_plan() if int8 else quant_plan(bits)
    l1 = mix(l1_skip, ExecutionPlan(exit_after=exit_after), name=f"L1:s{l1_sparsity}+exit")
    l2 = mix(l2_skip, q, name=f"L2:s{l2_sparsity}+a{bits}")
    l3 = replace(q, name=f"L3:a{bits}")
    hierarchy = Hierarchy("seed", (l1, l2, l3))
    hierarchy.validate(config)
    return hierarchy


def smollm2_seed_hierarchy(config: ModelConfig) -> Hierarchy:
    """The seed article's L1/L2/L3 with the searched ranking and the real int8 kernel."""
    return seed_hierarchy(config, ranking=SMOLLM2_RANKING, int8=True)


#: SmolLM2's blocks cheapest to drop whole (docs/smollm2.md): the layer-skip draft used where
#: the int8 cascade is not (another dtype, another SmolLM2 size).
SMOLLM2_SKIP_BLOCKS = (3, 4, 5, 6, 7, 10, 14)


def smollm2_skip_draft(config: ModelConfig) -> ExecutionPlan:
    """One draft that skips `SMOLLM2_SKIP_BLOCKS` (those among a smaller model's blocks, its last
    two always kept); it runs in any dtype."""
    skips = frozenset(i for i in SMOLLM2_SKIP_BLOCKS if i < config.n_layers - 2)
    plan = ExecutionPlan(skip_attention=skips, skip_mlp=skips, name="skip7")
    plan.validate(config)
    return plan


def attach_preset_drafts(model: Transformer, checkpoint_name: str) -> None:
    """Give ``model`` the preset hierarchy of the checkpoint ``checkpoint_name``, if one is known.

    SmolLM2-135M (recognised by its name and its 30 x 576 shape) in float32 gets
    `smollm2_cascade`; any other SmolLM2 checkpoint of 12 blocks or more, or one in another
    dtype, gets `smollm2_skip_draft`; any other checkpoint keeps ``preset_drafts = None`` (the
    core's generic default, `casspec_ref.speculative.default_drafts`).
    """
    config = model.config
    dtype = next(model.parameters()).dtype
    known = "smollm2" in checkpoint_name.lower().replace("-", "").replace(" ", "")
    if known and (config.n_layers, config.d_model) == (30, 576) and dtype == torch.float32:
        model.preset_drafts = tuple(smollm2_cascade(config).levels)
    elif known and config.n_layers >= 12:
        model.preset_drafts = (smollm2_skip_draft(config),)
