"""The execution plan: what one forward pass of the target model does.

A DSIA strategy (dynamically switchable inference acceleration, CAS-Spec §2 / docs/method.md §2)
is *data*: it produces an `ExecutionPlan`, and `Transformer.forward` reads that plan in one
clearly marked place. Nothing is monkeypatched and no module is swapped, so the target model and
all of its virtual draft models are the same object with the same weights.

The identity plan, `ExecutionPlan()`, reproduces the target's logits bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from casspec_ref.config import ModelConfig

#: The names a `LinearKernel` is called with, one per kind of linear layer in the model.
LINEAR_NAMES = (
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_o",
    "mlp_gate",
    "mlp_up",
    "mlp_down",
    "mlp_fc",
    "mlp_proj",
    "head",
)


class LinearKernel(Protocol):
    """How a linear layer computes ``x @ weight.T + bias`` under a plan.

    ``layer`` is the block index (``-1`` for the LM head) and ``name`` one of `LINEAR_NAMES`, so
    that a strategy can, say, quantize the activations entering every linear but ``mlp_down``.
    """

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor: ...


@dataclass(frozen=True)
class ExecutionPlan:
    """Which parts of the target run, and how, in one forward pass.

    Attributes:
        skip_attention: block indices whose attention sub-layer does not run (the residual
            stream passes through unchanged, and no K/V is written for that layer).
        skip_mlp: block indices whose MLP sub-layer does not run.
        exit_after: run only blocks ``[0, exit_after)``, then the shared final norm and LM head
            (early exit). ``None`` runs every block.
        linear: the kernel every linear layer goes through; ``None`` is the exact kernel.
        compute_dtype: run the forward in this dtype (the model casts its weights once and keeps
            the copy); ``None`` keeps the model's own dtype.
        name: a label for statistics and plots.
    """

    skip_attention: frozenset[int] = field(default_factory=frozenset)
    skip_mlp: frozenset[int] = field(default_factory=frozenset)
    exit_after: int | None = None
    linear: LinearKernel | None = None
    compute_dtype: torch.dtype | None = None
    name: str = "target"

    @property
    def is_identity(self) -> bool:
        """True when the plan runs the target exactly (every sub-layer, exact kernel, own dtype)."""
        return (
            not self.skip_attention
            and not self.skip_mlp
            and self.exit_after is None
            and self.linear is None
            and self.compute_dtype is None
        )

    def validate(self, config: ModelConfig) -> None:
        """Raise `ValueError` naming the bad field and the allowed range."""
        n = config.n_layers
        for field_name, layers in (
            ("skip_attention", self.skip_attention),
            ("skip_mlp", self.skip_mlp),
        ):
            bad = sorted(i for i in layers if not 0 <= i < n)
            if bad:
                raise ValueError(
                    f"ExecutionPlan.{field_name} has layer indices {bad} out of range: "
                    f"allowed are 0..{n - 1} for a model with {n} layers"
                )
        if self.exit_after is not None and not 1 <= self.exit_after <= n:
            raise ValueError(
                f"ExecutionPlan.exit_after={self.exit_after} is out of range: allowed are "
                f"1..{n} (the number of blocks to run) or None for all {n}"
            )
        if self.compute_dtype is not None and not self.compute_dtype.is_floating_point:
            raise ValueError(
                f"ExecutionPlan.compute_dtype={self.compute_dtype} is not a floating-point dtype: "
                "allowed are torch.float64, torch.float32, torch.bfloat16, torch.float16 or None"
            )

    def runs_attention(self, layer: int) -> bool:
        """Whether block `layer` runs its attention sub-layer under this plan."""
        return layer not in self.skip_attention and (
            self.exit_after is None or layer < self.exit_after
        )


#: The target itself.
IDENTITY = ExecutionPlan()
