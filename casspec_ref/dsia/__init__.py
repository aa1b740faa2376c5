"""DSIA: the target model as a family of virtual draft models, plus prompt lookup.

Scope: docs/method.md §2. Reading order:
- `layer_sparsity`, `early_exit`, `act_quant`, `precision`: one strategy each, each a builder
  of `casspec_ref.plan.ExecutionPlan` (strategies are data, read by the model in one place);
- `compose`: Mixing / Scaling / Replacing and named hierarchies;
- `virtual_draft`: `DraftRunner`, running plans on scratch rows of the target's KV cache;
- `prompt_lookup`: PLD, the deterministic bottom draft.

The measuring tools (teacher-forced scoring, the layer search) live in `casspec_ref.tools`, the
per-checkpoint presets and the seed article's L1/L2/L3 in `casspec_ref.io.presets`, the real int8
kernels in `casspec_ref.accel.int8`.
"""

from casspec_ref.dsia.act_quant import QuantKernel, fake_quant_absmax, quant_plan
from casspec_ref.dsia.compose import Hierarchy, mix, replace, scale
from casspec_ref.dsia.early_exit import early_exit_plan
from casspec_ref.dsia.layer_sparsity import (
    alternate_skip_plan,
    ranked_skip_plan,
    skip_layers_plan,
    sparsity,
    sublayer_plan,
)
from casspec_ref.dsia.precision import precision_plan
from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig
from casspec_ref.dsia.virtual_draft import DraftRunner

__all__ = [
    "DraftRunner",
    "Hierarchy",
    "PromptLookup",
    "PromptLookupConfig",
    "QuantKernel",
    "alternate_skip_plan",
    "early_exit_plan",
    "fake_quant_absmax",
    "mix",
    "precision_plan",
    "quant_plan",
    "ranked_skip_plan",
    "replace",
    "scale",
    "skip_layers_plan",
    "sparsity",
    "sublayer_plan",
]
