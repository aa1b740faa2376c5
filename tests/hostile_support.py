"""Builders of good and hostile checkpoint files for the hostile-input and fuzz tests.

Not a test module. Valid files are written with the ``gguf`` package's writer and our own
safetensors writer; hostile ones are crafted byte by byte with :func:`gguf_bytes` and
:func:`safetensors_bytes`, which write exactly what they are told (no validation).
"""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import ModelConfig, tiny_llama
from casspec_ref.io import weights
from casspec_ref.io.weights import permute_qk_for_gguf
from casspec_ref.model import Transformer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Bytes with a token: tab, newline and printable ASCII. Every other byte (0x04, 0x13, 0xFF...)
# has none, so text containing it cannot be tokenized.
TOKEN_BYTES = [0x09, 0x0A, *range(0x20, 0x7F)]
VOCAB = len(SPECIALS) + len(TOKEN_BYTES)  # 100
TINY = tiny_llama(vocab_size=VOCAB, max_seq_len=256, n_layers=2, bos_id=1, eos_ids=(2,))


def _byte_token(b: int) -> str:
    from casspec_ref.io.tokenizer import bytes_to_unicode

    return bytes_to_unicode()[b]


def tiny_model(config: ModelConfig = TINY, seed: int = 0) -> Transformer:
    return random_init_(Transformer(config), seed=seed).eval()


def gguf_tensors(model: Transformer) -> dict[str, np.ndarray]:
    """Our state dict -> GGUF names, Q/K rows permuted as llama.cpp's converter does."""
    c = model.config
    inverse_block = {v: k for k, v in weights._GGUF_BLOCK_NAMES.items()}
    inverse_global = {v: k for k, v in weights._GGUF_GLOBAL_NAMES.items()}
    out: dict[str, np.ndarray] = {}
    for name, value in model.state_dict().items():
        value = value.float()
        if name in inverse_global:
            out[inverse_global[name]] = value.numpy()
            continue
        _, layer, rest = name.split(".", 2)
        module, suffix = rest.rsplit(".", 1)
        if module == "attn.q":
            value = permute_qk_for_gguf(value, c.n_heads)
        elif module == "attn.k":
            value = permute_qk_for_gguf(value, c.n_kv_heads)
        out[f"blk.{layer}.{inverse_block[module]}.{suffix}"] = value.contiguous().numpy()
    return out


def write_tiny_gguf(
    path: Path,
    config: ModelConfig = TINY,
    overrides: dict[str, int] | None = None,
    tokenizer: bool = True,
    drop: Sequence[str] = (),
) -> Path:
    """A valid tiny llama GGUF with a ChatML byte tokenizer; ``overrides`` replace the declared
    sizes (``block_count``, ``context_length``, ``head_count``...) without changing tensors."""
    sizes = {
        "block_count": config.n_layers,
        "context_length": config.max_seq_len,
        "embedding_length": config.d_model,
        "feed_forward_length": config.d_ff,
        "head_count": config.n_heads,
        "head_count_kv": config.n_kv_heads,
        **(overrides or {}),
    }
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(sizes["block_count"])
    writer.add_context_length(sizes["context_length"])
    writer.add_embedding_length(sizes["embedding_length"])
    writer.add_feed_forward_length(sizes["feed_forward_length"])
    writer.add_head_count(sizes["head_count"])
    writer.add_head_count_kv(sizes["head_count_kv"])
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.norm_eps)
    writer.add_vocab_size(config.vocab_size)
    if tokenizer:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list(SPECIALS + [_byte_token(b) for b in TOKEN_BYTES])
        writer.add_token_types([3] * len(SPECIALS) + [1] * len(TOKEN_BYTES))
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
    for name, value in gguf_tensors(tiny_model(config)).items():
        if name not in drop:
            writer.add_tensor(name, value.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ------------------------------------------------------------------------- raw GGUF crafting

GGUF_UINT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 7, 8, 9


def _gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_bytes(
    kv: Sequence[tuple[str, int, bytes]],
    tensors: Sequence[tuple[str, Sequence[int], int, int]] = (),
    data: bytes = b"",
    n_kv: int | None = None,
    n_tensors: int | None = None,
    version: int = 3,
) -> bytes:
    """A GGUF file from raw parts: ``kv`` = (key, value type, encoded value); ``tensors`` =
    (name, dims ne0-first, ggml type, offset). Counts may lie (``n_kv``, ``n_tensors``)."""
    out = b"GGUF" + struct.pack(
        "<IQQ",
        version,
        len(tensors) if n_tensors is None else n_tensors,
        len(kv) if n_kv is None else n_kv,
    )
    for key, kind, value in kv:
        out += _gguf_string(key) + struct.pack("<I", kind) + value
    for name, dims, ggml_type, offset in tensors:
        out += _gguf_string(name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
        out += struct.pack("<IQ", ggml_type, offset)
    out += b"\0" * (-len(out) % 32)
    return out + data


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def gstr(text: str | bytes) -> bytes:
    return _gguf_string(text)


def array_header(item_type: int, count: int) -> bytes:
    return struct.pack("<IQ", item_type, count)


def llama_kv(**sizes: int) -> list[tuple[str, int, bytes]]:
    """The minimal llama metadata for a hostile GGUF; ``sizes`` override the tiny defaults."""
    base = {
        "block_count": 1,
        "context_length": 16,
        "embedding_length": 8,
        "feed_forward_length": 8,
        "attention.head_count": 2,
        "vocab_size": 8,
    }
    base.update({k.replace("__", "."): v for k, v in sizes.items()})
    kv = [("general.architecture", GGUF_STRING, gstr("llama"))]
    kv += [(f"llama.{k}", GGUF_UINT32, u32(v)) for k, v in base.items()]
    kv.append(("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)))
    return kv


# ------------------------------------------------------------------------- safetensors crafting


def safetensors_bytes(header: Any, data: bytes = b"", raw_header: bytes | None = None) -> bytes:
    """A safetensors file with exactly this header (any JSON value) and data buffer."""
    blob = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + data


def hf_llama_dir(directory: Path, config: ModelConfig | None = None, seed: int = 0) -> Path:
    """A valid tiny Hugging Face Llama checkpoint directory (config.json + model.safetensors)."""
    from casspec_ref.io.safetensors_io import save_safetensors
    from casspec_ref.io.weights import to_hf_llama_state_dict

    config = config or tiny_llama(n_layers=1)
    model = tiny_model(config, seed)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "tie_word_embeddings": config.tie_embeddings,
        "bos_token_id": config.bos_id,
        "eos_token_id": list(config.eos_ids),
    }
    (directory / "config.json").write_text(json.dumps(cfg))
    state = {k: v.to(torch.float32) for k, v in model.state_dict().items()}
    save_safetensors(to_hf_llama_state_dict(state), directory / "model.safetensors")
    return directory


# ------------------------------------------------------------------------- bounds on a case


class CaseTooSlow(Exception):
    """Raised inside a case that ran past its time limit."""


@contextlib.contextmanager
def bounded(seconds: float = 5.0, extra_memory: int = 1 << 30) -> Iterator[None]:
    """Run a block under a time limit (SIGALRM) and an address-space cap of the current size
    plus ``extra_memory`` bytes (RLIMIT_AS, soft limit only, restored afterwards): a case that
    tries to allocate more gets a MemoryError instead of exhausting the machine."""
    old_soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    current = _address_space_bytes()
    cap = current + extra_memory
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)

    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTooSlow(f"the case ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (old_soft, hard))
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _address_space_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")
