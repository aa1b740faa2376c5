"""Known calling conventions: the field's verifiers are checked as they are written, with no glue.

A *signature* turns one drafted step (`ChainInputs` or `TreeInputs`) into the arguments a
family of implementations takes, and their return value back into the emitted tokens, checking
the return convention on the way. A value outside the convention is a `ContractViolation` (the
verdict CONTRACT ERROR, never NOT LOSSLESS), whose message names the expected signature and
return convention and quotes the offending value.

- ``chain``: ``fn(inputs: ChainInputs[, rng]) -> tokens``, the project's own convention;
- ``tree``: ``fn(inputs: TreeInputs[, rng]) -> tokens``;
- ``plain``: ``fn(p (K+1, V), q (K, V), draft_tokens (K,)) -> tokens``, float64 and long tensors;
- ``hf``: transformers' ``_speculative_sampling(candidate_input_ids (1, 1+K), candidate_logits
  (1, K, V), candidate_length K, new_logits (1, K+1, V), ...) -> (valid_tokens (1, n+1),
  n_matches)``; the logits are log-laws (``log q``, ``log p``), whose softmax is the law;
- ``vllm-v1``: vLLM v1's ``rejection_sample(draft_token_ids (K,), num_draft_tokens [K],
  max_spec_len, cu_num_draft_tokens (1,), draft_probs (K, V) or None, target_probs (K, V)
  (``log p`` when the parameter is named ``target_logits``, as in later versions),
  bonus_token_ids (1, 1), sampling_metadata) -> (1, K+1)``, -1 after the emitted tokens, or its
  ``RejectionSampler`` class, whose ``forward`` is called (`casspec_ref.proof.vllm_v1`); its
  Triton kernels run in Triton's interpreter, the draws carried through them
  (`casspec_ref.proof.triton_draws`). The bonus token is a pending draw, as for v0.
  ``vllm-v1-seeded`` and ``vllm-v1-mixed`` take the paths of a seeded request and of a batch
  that mixes greedy and random requests;
- ``vllm-v0``: vLLM v0's ``RejectionSampler.forward(target_with_bonus_probs (1, K+1, V),
  bonus_token_ids (1, 1), draft_probs (1, K, V), draft_token_ids (1, K)) -> (1, K+1)`` with -1
  after the emitted tokens. The bonus token is the caller's sample from
  ``target_with_bonus_probs[:, K]``: it is passed as a pending draw, decided only where the
  output uses it. A class is instantiated with no arguments (``init_gpu_tensors("cpu")`` is
  called when it has one).

Tokens may come as a list, a tuple or a tensor of ints; a leading batch dimension of size 1 is
understood. Anything else (a (tokens, count) pair under ``chain``, -1 padding, a token outside
0..V-1) is a contract error naming the signature that would fit.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from casspec_ref.proof import vllm_v1
from casspec_ref.proof.adapters import PendingDraw, Thunk
from casspec_ref.sampling import RandomSource


class ContractViolation(Exception):
    """The checked code's signature or return value is outside its calling convention."""

    def __init__(self, output: Any, reason: str) -> None:
        super().__init__(reason)
        self.output = _show(output)  # quoted in the report: a long value is shortened
        self.reason = reason


@dataclass(frozen=True)
class Signature:
    """One calling convention: its name, the kind of step it checks and its contract text."""

    name: str
    mode: str  # "chain" or "tree"
    contract: str
    positional: int  # the arguments the convention passes, before an optional rng


SIGNATURES = {
    "chain": Signature(
        "chain",
        "chain",
        "fn(inputs: ChainInputs) or fn(inputs, rng) returning the emitted tokens: the accepted "
        "prefix of inputs.draft_tokens, then one residual or bonus token (a list of 1 to K+1 "
        "ints in 0..V-1)",
        1,
    ),
    "tree": Signature(
        "tree",
        "tree",
        "fn(inputs: TreeInputs) or fn(inputs, rng) returning the tokens of an accepted root-down "
        "path, then one more token (a list of ints in 0..V-1)",
        1,
    ),
    "plain": Signature(
        "plain",
        "chain",
        "fn(p, q, draft_tokens) with p (K+1, V) and q (K, V) float64 tensors of laws and "
        "draft_tokens a (K,) long tensor, returning the emitted tokens (1 to K+1 ints)",
        3,
    ),
    "hf": Signature(
        "hf",
        "chain",
        "transformers' _speculative_sampling(candidate_input_ids (1, 1+K), candidate_logits "
        "(1, K, V), candidate_length, new_logits (1, K+1, V), ...) returning (valid_tokens "
        "(1, n+1), n_matches)",
        4,
    ),
    "vllm-v0": Signature(
        "vllm-v0",
        "chain",
        "vLLM v0 RejectionSampler.forward(target_with_bonus_probs (B, K+1, V), bonus_token_ids "
        "(B, 1), draft_probs (B, K, V), draft_token_ids (B, K)) returning a (B, K+1) long "
        "tensor: the accepted drafts, the recovered or bonus token, then -1",
        4,
    ),
    **{
        name: Signature(
            name,
            "chain",
            "vLLM v1 rejection_sample(draft_token_ids (K,) int32, num_draft_tokens [K], "
            "max_spec_len K, cu_num_draft_tokens (1,) int32, draft_probs (K, V) or None, "
            "target_probs (K, V) or target_logits, bonus_token_ids (1, 1), sampling_metadata), "
            "or a RejectionSampler class (forward(metadata, draft_probs, target_logits, "
            "bonus_token_ids, sampling_metadata) or forward(metadata, draft_probs, logits "
            "(K+1, V), sampling_metadata)), returning a (1, K+1) int tensor (or a SamplerOutput "
            "holding it): the accepted drafts, the recovered or bonus token, then -1" + what,
            8,
        )
        for name, what in vllm_v1.VARIANTS.items()
    },
}


def help_text(name: str) -> str:
    """The contract of signature ``name`` as the command line's help gives it: a vLLM v1
    variant by its difference from ``vllm-v1``."""
    if name in vllm_v1.VARIANTS and name != "vllm-v1":
        return "as vllm-v1" + vllm_v1.VARIANTS[name]
    return SIGNATURES[name].contract


def signature_names() -> list[str]:
    return list(SIGNATURES)


def get_signature(name: str) -> Signature:
    if name not in SIGNATURES:
        raise ValueError(f"unknown signature {name!r}; known: {', '.join(SIGNATURES)}")
    return SIGNATURES[name]


# ---------------------------------------------------------------------------------------------
# The call: binding checked before the first case
# ---------------------------------------------------------------------------------------------


def prepare(fn: Any, signature: Signature) -> tuple[Callable[..., Any], bool]:
    """The callable to run and whether it takes ``rng``; a `ContractViolation` when its
    parameters cannot take the convention's arguments."""
    factory = fn.func if isinstance(fn, functools.partial) else fn
    if signature.name == "vllm-v0" and inspect.isclass(factory):
        fn = fn()
        if hasattr(fn, "init_gpu_tensors"):
            fn.init_gpu_tensors("cpu", device_type="cpu")
    positional = signature.positional
    if signature.name in vllm_v1.VARIANTS:
        positional = vllm_v1.positional(fn)
        fn = vllm_v1.instantiate(fn)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn, False  # a builtin or scripted callable: called with the positional arguments
    described = f"{_name(fn)}({', '.join(params)})"
    probe = [object()] * positional
    takes_rng = positional == 1 and "rng" in params
    try:
        inspect.signature(fn).bind(*probe, *([object()] if takes_rng else []))
    except TypeError as err:
        raise ContractViolation(
            described, f"the signature does not fit ({err}); expected {signature.contract}"
        ) from None
    return fn, takes_rng


def _name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


# ---------------------------------------------------------------------------------------------
# Arguments in, tokens out
# ---------------------------------------------------------------------------------------------


def call_chain(
    fn: Callable[..., Any],
    signature: Signature,
    inputs: Any,
    rng: RandomSource,
    takes_rng: bool,
    call: Callable[..., Any],
) -> list[int]:
    """Call ``fn`` (through ``call``, the sandbox) on one chain step; return the emitted tokens."""
    vocab = int(inputs.target_probs.shape[1])
    if signature.name in ("chain", "tree"):
        output = call(fn, inputs, rng) if takes_rng else call(fn, inputs)
        return tokens_of(output, vocab, signature)
    p = torch.tensor(np.asarray(inputs.target_probs, dtype=np.float64))  # (K+1, V)
    q = torch.tensor(np.asarray(inputs.draft_probs, dtype=np.float64))  # (K, V)
    drafts = torch.tensor(inputs.draft_tokens, dtype=torch.long)  # (K,)
    k = len(inputs.draft_tokens)
    if signature.name == "plain":
        return tokens_of(call(fn, p, q, drafts), vocab, signature)
    if signature.name == "hf":
        with np.errstate(divide="ignore"):
            candidate_logits = torch.log(q)[None]  # (1, K, V)
            new_logits = torch.log(p)[None]  # (1, K+1, V)
        ids = torch.tensor([[0, *inputs.draft_tokens]], dtype=torch.long)  # (1, 1+K)
        return _hf_tokens(call(fn, ids, candidate_logits, k, new_logits), vocab, signature)
    thunk = Thunk(lambda: int(rng.categorical(inputs.target_probs[k])))
    bonus = PendingDraw.make(np.array([[thunk]], dtype=object))  # (1, 1), drawn where used
    if signature.name in vllm_v1.VARIANTS:
        args = vllm_v1.arguments(fn, signature.name, inputs, p, q, bonus, rng)
        output = vllm_v1.output_tensor(call(fn, *args))
        return _padded_tokens(output, k, vocab, signature)
    output = call(fn, p[None], bonus, q[None], drafts[None])  # (1, K+1)
    return _padded_tokens(output, k, vocab, signature)


def tokens_of(output: Any, vocab: int, signature: Signature) -> list[int]:
    """A flat list of token ids (leading batch dims of size 1 dropped), or a contract error."""
    if isinstance(output, torch.Tensor | np.ndarray):
        shape = tuple(output.shape)
        if len(shape) > 1 and any(d != 1 for d in shape[:-1]):
            raise ContractViolation(
                _show(output), f"returned an array of shape {shape}; expected {signature.contract}"
            )
        output = output.reshape(-1).tolist()
    if not isinstance(output, list | tuple):
        raise ContractViolation(
            _show(output),
            f"returned {type(output).__name__}, not tokens; expected {signature.contract}",
        )
    if isinstance(output, tuple) and any(not _is_int(t) for t in output):
        hint = " (transformers' (valid_tokens, n_matches)? use --signature hf)"
        hint = hint if len(output) == 2 else ""
        raise ContractViolation(
            _show(output),
            f"returned a tuple of {len(output)} values that are not all token ids{hint}; "
            f"expected {signature.contract}",
        )
    out = []
    for t in output:
        if not _is_int(t):
            raise ContractViolation(
                _show(output), f"token {t!r} is not an integer; expected {signature.contract}"
            )
        if not 0 <= int(t) < vocab:
            hint = " (-1 padding? --signature vllm-v0 or vllm-v1 reads padded output)"
            hint = hint if int(t) == -1 else ""
            raise ContractViolation(
                _show(output),
                f"token {int(t)} is outside 0..{vocab - 1}{hint}; expected {signature.contract}",
            )
        out.append(int(t))
    return out


def _hf_tokens(output: Any, vocab: int, signature: Signature) -> list[int]:
    if not (isinstance(output, tuple) and len(output) == 2):
        raise ContractViolation(
            _show(output), f"expected a (valid_tokens, n_matches) pair; {signature.contract}"
        )
    valid, n_matches = output
    tokens = tokens_of(valid, vocab, signature)
    n = int(n_matches)
    if n != len(tokens) - 1:
        raise ContractViolation(
            _show(output),
            f"n_matches is {n} but valid_tokens holds {len(tokens)} tokens (n_matches + 1 "
            f"expected); {signature.contract}",
        )
    return tokens


def _padded_tokens(output: Any, k: int, vocab: int, signature: Signature) -> list[int]:
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != (1, k + 1):
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ContractViolation(
            _show(output), f"returned {shape}, not a (1, {k + 1}) tensor; {signature.contract}"
        )
    row = [int(t) for t in output[0].tolist()]
    n = row.index(-1) if -1 in row else len(row)
    if any(t != -1 for t in row[n:]):
        raise ContractViolation(
            _show(row), f"a token after the first -1 (-1 only pads the end); {signature.contract}"
        )
    return tokens_of(row[:n], vocab, signature)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


#: How many items of an offending list or tuple a contract error quotes.
_SHOWN_ITEMS = 12


def _show(value: Any) -> Any:
    """A short, JSON-friendly rendering of an offending value."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return f"{type(value).__name__}(shape={tuple(value.shape)}, {value.tolist()!r:.60})"
    if isinstance(value, tuple | list):
        if len(value) > _SHOWN_ITEMS:
            head = ", ".join(repr(_show(v)) for v in value[:_SHOWN_ITEMS])
            return f"{type(value).__name__} of {len(value)} items: [{head}, ...]"
        return type(value)(_show(v) for v in value)
    if isinstance(value, bool | int | float | np.integer):
        return value.item() if isinstance(value, np.integer) else value
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
