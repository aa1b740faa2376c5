"""vLLM v1's calling convention: one drafted step as the arguments its rejection sampler takes.

vLLM v1 batches requests flat: K drafts of one request are rows of a (K, V) tensor, located by an
inclusive cumulative count ``cu_num_draft_tokens``; the result is a (B, K+1) int32 tensor padded
with -1. Three forms of the sampler are called as written, told apart by their parameter names:

- ``rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
  draft_probs, target_probs | target_logits, bonus_token_ids, sampling_metadata)``;
- ``RejectionSampler.forward(metadata, draft_probs, target_logits, bonus_token_ids,
  sampling_metadata)``: built with no arguments, the bonus token passed in;
- ``RejectionSampler.forward(metadata, draft_probs, logits, sampling_metadata)``: built with the
  ``Sampler`` that draws the bonus token from the last of the K+1 logits rows. The oracle builds
  it with `BonusSampler`, its own pending draw from the law of the rows it is handed, so a
  forward that hands its sampler the wrong row is caught; vLLM's ``Sampler`` is not checked.

The bonus token is a pending draw in every form: decided only where the output uses it.
Logits are ``log p`` (their softmax is the case's law). The checked code computes its target
law from them in float32 (``softmax(dtype=torch.float32)``), so such code is judged at the
float32 tolerance unless asked otherwise (`reads_logits`).

Three variants of the sampling metadata take the three paths a request can take:

- ``vllm-v1``: ``all_greedy`` on a greedy step, ``all_random`` otherwise, no generators;
- ``vllm-v1-seeded``: a random request carries its own seeded ``torch.Generator``
  (``generators={0: g}``), the path of requests with a seed, which draw into slices of the
  batch's uniforms and exponentials;
- ``vllm-v1-mixed``: ``all_greedy`` and ``all_random`` both false, as in a batch that mixes
  greedy and random requests: the per-request ``temperature == GREEDY_TEMPERATURE`` test decides.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from casspec_ref.proof.adapters import PendingDraw, Thunk
from casspec_ref.sampling import RandomSource

#: The signature names of the three metadata variants (module docstring), each with what it adds
#: to the contract.
VARIANTS = {
    "vllm-v1": "",
    "vllm-v1-seeded": "; each random request seeded with its own torch.Generator",
    "vllm-v1-mixed": "; all_greedy and all_random both false (a batch mixing greedy and random)",
}

#: The seed of a seeded request's generator (any seed gives the same law).
SEED = 0


@dataclass
class LogitsProcessors:
    """The logits processors a request carries: none."""

    argmax_invariant: list[Any] = field(default_factory=list)
    non_argmax_invariant: list[Any] = field(default_factory=list)


@dataclass
class VllmV1SamplingMetadata:
    """The fields of vLLM v1's ``SamplingMetadata`` its rejection sampler reads, for one request
    with no penalties, bad words or logits processors: ``temperature`` is the checked module's
    greedy constant on a greedy step, 1 otherwise (the case's law is processed already).
    ``draws`` is not vLLM's: the oracle's source, read by `BonusSampler`."""

    temperature: torch.Tensor
    all_greedy: bool
    all_random: bool
    generators: dict[int, torch.Generator]
    top_k: torch.Tensor | None = None
    top_p: torch.Tensor | None = None
    max_num_logprobs: int | None = None
    no_penalties: bool = True
    prompt_token_ids: torch.Tensor | None = None
    output_token_ids: list[list[int]] = field(default_factory=lambda: [[]])
    spec_token_ids: list[list[int]] | None = None
    allowed_token_ids_mask: torch.Tensor | None = None
    bad_words_token_ids: dict[int, list[list[int]]] = field(default_factory=dict)
    logitsprocs: LogitsProcessors = field(default_factory=LogitsProcessors)
    thinking_budget_state_holder: Any = None
    draws: RandomSource | None = None


@dataclass
class VllmV1SpecDecodeMetadata:
    """vLLM v1's ``SpecDecodeMetadata`` for one request of K drafts: logits rows 0..K-1 score the
    drafts, row K the bonus token."""

    draft_token_ids: torch.Tensor  # (K,) int32
    num_draft_tokens: list[int]  # [K]
    cu_num_draft_tokens: torch.Tensor  # (1,) int32: [K]
    cu_num_sampled_tokens: torch.Tensor  # (1,) int32: [K + 1]
    target_logits_indices: torch.Tensor  # (K,): 0..K-1
    bonus_logits_indices: torch.Tensor  # (1,): [K]
    logits_indices: torch.Tensor  # (K + 1,)
    max_spec_len: int


@dataclass
class SamplerOutput:
    """What vLLM v1's ``Sampler`` and ``RejectionSampler.forward`` return."""

    sampled_token_ids: torch.Tensor
    logprobs_tensors: Any = None


class BonusSampler:
    """The ``Sampler`` a current-form ``RejectionSampler`` is built with, as its ``forward`` uses
    it: one pending draw per row of the logits it is handed, from their softmax (greedy: their
    argmax), drawn through ``sampling_metadata.draws``."""

    logprobs_mode = "raw_logprobs"

    def __call__(
        self, logits: torch.Tensor, sampling_metadata: VllmV1SamplingMetadata, **_: Any
    ) -> SamplerOutput:
        rng = sampling_metadata.draws
        if rng is None:
            raise ValueError("BonusSampler needs the oracle's sampling metadata (draws)")
        laws = torch.softmax(torch.as_tensor(logits).detach().to(torch.float64), dim=-1)
        if sampling_metadata.all_greedy:
            laws = torch.nn.functional.one_hot(laws.argmax(-1), laws.shape[-1]).double()
        thunks = [[Thunk(functools.partial(_categorical, rng, law.numpy()))] for law in laws]
        return SamplerOutput(PendingDraw.make(np.array(thunks, dtype=object)))  # (B, 1)


def _categorical(rng: RandomSource, law: np.ndarray) -> int:
    return int(rng.categorical(law))


# ---------------------------------------------------------------------------------------------
# Which form, and how it is built
# ---------------------------------------------------------------------------------------------


def form(fn: Any) -> str:
    """``function``, ``forward-bonus`` (the bonus passed in) or ``forward`` (the bonus drawn by
    the sampler it is built with), read from the parameter names of ``fn`` (a class: its
    ``forward``)."""
    names = parameter_names(fn)
    if names[:1] != ["metadata"]:
        return "function"
    return "forward-bonus" if "bonus_token_ids" in names else "forward"


def parameter_names(fn: Any) -> list[str]:
    """The parameters of ``fn``; of a class (or a partial of one), those of its ``forward``."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    if inspect.isclass(target):
        return _names(getattr(target, "forward", target))[1:]  # without self
    return _names(fn)


def _names(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def reads_logits(fn: Any) -> bool:
    """Whether ``fn`` takes logits, whose softmax it computes in float32."""
    names = parameter_names(fn)
    return form(fn) != "function" or names[5:6] == ["target_logits"]


#: The report's note when `judged_in_float32` set the tolerance.
FLOAT32_NOTE = (
    "tolerance float32 (1e-5): the checked code takes logits, and vLLM v1 computes the target "
    "law from them in float32 (softmax(dtype=torch.float32)); --tolerance float64 "
    "(tolerance='float64') judges that rounding too"
)


def judged_in_float32(fn: Any, signature: Any) -> bool:
    """Whether ``fn``, checked under ``signature``, is judged at the float32 tolerance unless
    told otherwise: vLLM v1 code that takes logits."""
    return getattr(signature, "name", signature) in VARIANTS and reads_logits(fn)


def positional(fn: Any) -> int:
    """How many arguments the form of ``fn`` is called with."""
    return {"function": 8, "forward-bonus": 5, "forward": 4}[form(fn)]


def instantiate(fn: Any) -> Any:
    """A class (or a partial of one) built as vLLM builds it; its bound ``forward``. Anything
    else is returned as it is."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    if not inspect.isclass(target):
        return fn
    sampler = fn(BonusSampler()) if form(fn) == "forward" else fn()
    return sampler.forward


# ---------------------------------------------------------------------------------------------
# Arguments in, the output tensor out
# ---------------------------------------------------------------------------------------------


def arguments(
    fn: Callable[..., Any],
    variant: str,
    inputs: Any,
    p: torch.Tensor,
    q: torch.Tensor,
    bonus: PendingDraw,
    rng: RandomSource,
) -> tuple[Any, ...]:
    """The arguments of one request of K drafts, in the form of ``fn`` (module docstring). A
    draft law that is a point mass on each drafted token is passed as None (the n-gram path)."""
    k = len(inputs.draft_tokens)
    drafts = torch.tensor(inputs.draft_tokens, dtype=torch.int32)
    point_masses = bool((q[torch.arange(k), drafts.long()] == 1).all())
    draft_probs = None if point_masses else q
    metadata = _sampling_metadata(fn, variant, float(inputs.temperature) == 0, rng)
    cu = torch.tensor([k], dtype=torch.int32)
    shape = form(fn)
    if shape == "function":
        target = _log(p[:k]) if reads_logits(fn) else p[:k]
        return (drafts, [k], k, cu, draft_probs, target, bonus, metadata)
    rows = torch.arange(k + 1)
    spec = VllmV1SpecDecodeMetadata(
        drafts, [k], cu, cu + 1, rows[:k], rows[k:], rows, max_spec_len=k
    )
    if shape == "forward-bonus":
        return (spec, draft_probs, _log(p[:k]), bonus, metadata)
    return (spec, draft_probs, _log(p), metadata)


def _log(laws: torch.Tensor) -> torch.Tensor:
    return torch.log(laws)  # log 0 = -inf: softmax gives 0 back


def _sampling_metadata(
    fn: Callable[..., Any], variant: str, greedy: bool, rng: RandomSource
) -> VllmV1SamplingMetadata:
    if variant not in VARIANTS:
        raise ValueError(f"unknown vLLM v1 variant {variant!r}; known: {', '.join(VARIANTS)}")
    greedy_value = _module_globals(fn).get("GREEDY_TEMPERATURE", -1)
    greedy_value = getattr(greedy_value, "value", greedy_value)  # a tl.constexpr holds .value
    temperature = torch.tensor([greedy_value if greedy else 1.0])
    seeded = variant == "vllm-v1-seeded" and not greedy
    generators = {0: torch.Generator().manual_seed(SEED)} if seeded else {}
    mixed = variant == "vllm-v1-mixed"
    return VllmV1SamplingMetadata(
        temperature,
        all_greedy=greedy and not mixed,
        all_random=not greedy and not mixed,
        generators=generators,
        draws=rng,
    )


def _module_globals(fn: Any) -> Mapping[str, Any]:
    """The globals of the module that defines ``fn`` (a function, a bound method or a class)."""
    unwrapped = inspect.unwrap(fn.func if isinstance(fn, functools.partial) else fn)
    found = getattr(unwrapped, "__globals__", None)
    if found is None:
        module = sys.modules.get(getattr(unwrapped, "__module__", "") or "")
        found = vars(module) if module is not None else {}
    return found  # type: ignore[no-any-return]


def output_tensor(output: Any) -> Any:
    """The (B, K+1) tensor of a return value: a ``SamplerOutput``'s ``sampled_token_ids``."""
    return getattr(output, "sampled_token_ids", output)
