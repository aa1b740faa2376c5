"""The execution plan: what one forward pass of the target model does.

A DSIA strategy (CAS-Spec §2, docs/method.md §2) is *data*: it produces an `ExecutionPlan`, and
`Transformer.forward` reads that plan in one marked place. Nothing is monkeypatched, so the
target and all its virtual draft models are one object with one set of weights. The identity
plan, `ExecutionPlan()`, reproduces the target's logits bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from casspec_ref.base.model_checks import check_plan
from casspec_ref.config import ModelConfig

#: The names a `LinearKernel` is called with, one per kind of linear layer in the model.
LINEAR_NAMES = (
    ("attn_q", "attn_k", "attn_v", "attn_o")
    + ("mlp_gate", "mlp_up", "mlp_down")  # Llama's SwiGLU MLP
    + ("mlp_fc", "mlp_proj")  # GPT-2's MLP
    + ("head",)
)

#: How a plan computes a linear layer's ``x @ weight.T + bias``: ``kernel(x, weight, bias, layer,
#: name)``, ``layer`` -1 for the LM head; ``name`` (`LINEAR_NAMES`) lets a strategy pick linears.
LinearKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None, int, str], torch.Tensor]


@dataclass(frozen=True)
class ExecutionPlan:
    """Which parts of the target run, and how, in one forward pass."""

    # Blocks whose attention / MLP sub-layer does not run (the residual stream passes through;
    # a skipped attention writes no K/V).
    skip_attention: frozenset[int] = field(default_factory=frozenset)
    skip_mlp: frozenset[int] = field(default_factory=frozenset)
    # Early exit: run blocks [0, exit_after), then the shared final norm and head (None = all).
    exit_after: int | None = None
    linear: LinearKernel | None = None  # the kernel every linear layer goes through (None = exact)
    # Run in this dtype on weight copies the model casts once (None = the model's own dtype).
    compute_dtype: torch.dtype | None = None
    name: str = "target"  # a label for statistics and plots

    @property
    def is_identity(self) -> bool:
        """True when the plan runs the target exactly (every sub-layer, exact kernel, own dtype)."""
        every_block = not self.skip_attention and not self.skip_mlp and self.exit_after is None
        return every_block and self.linear is None and self.compute_dtype is None

    def validate(self, config: ModelConfig) -> None:
        """Raise `ValueError` naming the bad field and the allowed range."""
        check_plan(self, config.n_layers)


IDENTITY = ExecutionPlan()  # the target itself
