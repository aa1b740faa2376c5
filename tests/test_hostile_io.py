"""Hostile and broken checkpoints: each gets a clear ValueError, fast and without big allocations.

The findings of the hostile-input probe (numbered as in its catalogue) are reproduced here, each
under :func:`hostile_support.bounded` (5 s, +1 GiB of address space), so a regression to "hangs"
or "allocates terabytes" fails as a test instead of taking the machine down. The project's own
GGUF parser is checked against ``gguf.GGUFReader`` and its safetensors reader against the
``safetensors`` package (skipped when that package is absent).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from hostile_support import (
    GGUF_ARRAY,
    GGUF_BOOL,
    GGUF_STRING,
    TINY,
    array_header,
    bounded,
    gguf_bytes,
    gstr,
    hf_llama_dir,
    llama_kv,
    safetensors_bytes,
    write_tiny_gguf,
)

from casspec_ref.io.gguf import GGML_TYPES, GGUFFile, read_gguf_metadata
from casspec_ref.io.safetensors_io import load_safetensors, save_safetensors
from casspec_ref.io.tokenizer import Tokenizer
from casspec_ref.io.weights import load_gguf, load_hf_dir, load_model

GIB = 1 << 30


def _rejects(call, *args, match: str = "", **kwargs) -> str:  # type: ignore[no-untyped-def]
    """Run ``call`` bounded; it must raise ValueError (matching ``match``); return the message."""
    with bounded(), pytest.raises(ValueError, match=match) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "Traceback" not in message and len(message) < 2000, message
    return message


def _edit_config(directory: Path, **fields: object) -> None:
    cfg = json.loads((directory / "config.json").read_text())
    cfg.update(fields)
    (directory / "config.json").write_text(json.dumps(cfg))


# ----------------------------------------------------------------------- finding 1: layer counts


def test_f1_hf_config_with_a_billion_layers_is_refused_at_once(tmp_path: Path) -> None:
    directory = hf_llama_dir(tmp_path / "ckpt")
    _edit_config(directory, num_hidden_layers=1_000_000_000)
    _rejects(load_model, directory, match=r"n_layers=1000000000 but the tensors hold 1 layers")


def test_f1_gguf_block_count_beyond_the_tensors_is_refused(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf", overrides={"block_count": 100_000})
    _rejects(load_model, path, match=r"n_layers=100000 but the tensors hold 2 layers")


def test_f1_config_sizes_are_checked_against_the_tensor_table(tmp_path: Path) -> None:
    # Heads and widths that disagree with the tensors: caught before any tensor is decoded.
    path = write_tiny_gguf(tmp_path / "heads.gguf", overrides={"head_count": 8, "head_count_kv": 8})
    _rejects(load_model, path, match=r"wrong shapes.*attn\.k\.weight")
    path = write_tiny_gguf(tmp_path / "ff.gguf", overrides={"feed_forward_length": 64})
    _rejects(load_model, path, match=r"wrong shapes.*mlp")
    path = write_tiny_gguf(tmp_path / "short.gguf", drop=("blk.1.ffn_up.weight",))
    _rejects(load_model, path, match=r"missing \['layers\.1\.mlp\.up\.weight'\]")
    directory = hf_llama_dir(tmp_path / "ckpt")
    _edit_config(directory, hidden_size=64)
    _rejects(load_model, directory, match="wrong shapes")


# ----------------------------------------------------------------------- finding 2: GGUF metadata


def test_f2_a_2_to_the_40_item_array_in_1_kb_is_refused_at_once(tmp_path: Path) -> None:
    kv = llama_kv() + [("x.bools", GGUF_ARRAY, array_header(GGUF_BOOL, 2**40))]
    path = tmp_path / "huge_array.gguf"
    path.write_bytes(gguf_bytes(kv))
    assert path.stat().st_size < 1024
    for call in (load_model, read_gguf_metadata, Tokenizer.from_gguf):
        _rejects(call, path, match=r"1099511627776 items needs at least")


def test_f2_deeply_nested_arrays_and_lying_counts_are_refused(tmp_path: Path) -> None:
    nested = array_header(GGUF_ARRAY, 1) * 50 + array_header(4, 0)
    cases = {
        "nested": (gguf_bytes(llama_kv() + [("x.n", GGUF_ARRAY, nested)]), "nested deeper"),
        "kv_count": (gguf_bytes(llama_kv(), n_kv=2**62), "declares 4611686018427387904 key"),
        "tensor_count": (gguf_bytes(llama_kv(), n_tensors=2**40), "1099511627776 tensors"),
        "long_string": (
            gguf_bytes([("general.name", GGUF_STRING, struct.pack("<Q", 2**50) + b"x")]),
            "runs past the end",
        ),
        "strings_array": (
            gguf_bytes(llama_kv() + [("x.s", GGUF_ARRAY, array_header(GGUF_STRING, 2**33))]),
            "8589934592 items",
        ),
        "value_type": (gguf_bytes([("x", 99, b"")]), "unknown value type 99"),
        "version": (gguf_bytes(llama_kv(), version=7), "version 7"),
        "magic": (b"GGUG" + bytes(40), "not a GGUF file"),
    }
    for label, (blob, message) in cases.items():
        path = tmp_path / f"{label}.gguf"
        path.write_bytes(blob)
        _rejects(load_model, path, match=message)


def test_f2_head_count_zero_is_a_clear_error(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "h0.gguf", overrides={"head_count": 0})
    _rejects(load_model, path, match=r"head_count=0: must be >= 1")
    directory = hf_llama_dir(tmp_path / "hf")
    _edit_config(directory, num_attention_heads=0)
    _rejects(load_model, directory, match=r"num_attention_heads=0")


def test_f2_huge_contexts_are_refused_before_allocation(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "ctx.gguf", overrides={"context_length": 4_000_000_000})
    message = _rejects(load_model, path, match="memory budget")
    assert "max_seq_len=4000000000" in message and "--max-context" in message
    directory = hf_llama_dir(tmp_path / "hf")
    for context in (10**8, 10**12):
        _edit_config(directory, max_position_embeddings=context)
        _rejects(load_model, directory, memory_budget=4 * GIB, match="memory budget")
    # The way out the message names: cap the context; the model then runs.
    with bounded(seconds=30):
        model, _ = load_model(directory, memory_budget=4 * GIB, max_context=64)
        assert model.config.max_seq_len == 64
        assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, model.config.vocab_size)
        model, _ = load_model(path, max_context=128)
        assert model.config.max_seq_len == 128


def test_f2_memory_budget_is_an_override_both_ways(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf")
    _rejects(load_model, path, memory_budget=1000, match=r"more than the memory budget")
    model, tokenizer = load_model(path, memory_budget=GIB)
    assert model.config == TINY and tokenizer is not None
    _rejects(load_model, path, memory_budget=0, match=r"memory_budget=0")
    _rejects(load_model, path, max_context=0, match=r"max_context=0")


def test_loading_never_uses_gguf_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("gguf.GGUFReader was used")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    monkeypatch.setattr(gguf.gguf_reader, "GGUFReader", refuse)
    model, tokenizer = load_model(write_tiny_gguf(tmp_path / "m.gguf"))
    assert tokenizer is not None and model.config == TINY


# ----------------------------------------------------------------------- our GGUF parser


def test_gguf_parser_agrees_with_gguf_reader(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf")
    ours = GGUFFile(path)
    theirs = gguf.GGUFReader(path)
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        expected = field.contents()
        assert (
            ours.metadata[key] == pytest.approx(expected)
            if isinstance(expected, float)
            else ours.metadata[key] == expected
        ), key
    assert set(ours.tensors) == {t.name for t in theirs.tensors}
    for tensor in theirs.tensors:
        info = ours.tensors[tensor.name]
        assert info.shape == tuple(int(d) for d in reversed(tensor.shape.tolist()))
        assert info.type_name == tensor.tensor_type.name
        assert np.array_equal(ours.tensor_bytes(tensor.name), tensor.data.view(np.uint8).ravel())


def test_ggml_type_table_matches_the_gguf_package() -> None:
    for type_id, (name, block_elems, block_bytes) in GGML_TYPES.items():
        qtype = gguf.GGMLQuantizationType(type_id)
        assert qtype.name == name
        assert gguf.GGML_QUANT_SIZES[qtype] == (block_elems, block_bytes), name


def test_gguf_tensor_table_is_validated_against_the_file(tmp_path: Path) -> None:
    kv = llama_kv()
    f32 = 0
    cases = {
        "beyond_end": ([("a", [8], f32, 0)], bytes(16), "truncated"),
        "overlap": ([("a", [8], f32, 0), ("b", [8], f32, 0)], bytes(64), "overlap"),
        "duplicate": ([("a", [8], f32, 0), ("a", [8], f32, 32)], bytes(64), "appears twice"),
        "zero_dim": ([("a", [0], f32, 0)], bytes(32), "extents must be >= 1"),
        "five_dims": ([("a", [1] * 5, f32, 0)], bytes(32), "5 dimensions"),
        "huge": ([("a", [2**40, 2**40], f32, 0)], bytes(32), ">= 2\\^63"),
        "bad_type": ([("a", [8], 1000, 0)], bytes(32), "unknown ggml type id 1000"),
        "misaligned": ([("a", [8], f32, 3)], bytes(64), "alignment"),
        "block": ([("a", [33], 8, 0)], bytes(64), "block size 32"),
    }
    for label, (tensors, data, message) in cases.items():
        path = tmp_path / f"{label}.gguf"
        path.write_bytes(gguf_bytes(kv, tensors, data))
        _rejects(GGUFFile, path, match=message)


def test_gguf_metadata_with_wrong_types_is_refused(tmp_path: Path) -> None:
    kv = [k for k in llama_kv() if k[0] != "llama.embedding_length"]
    kv.append(("llama.embedding_length", GGUF_STRING, gstr("wide")))
    path = tmp_path / "typed.gguf"
    path.write_bytes(gguf_bytes(kv))
    _rejects(load_model, path, match=r"embedding_length='wide': must be an integer")


# ----------------------------------------------------------------------- finding 8: safetensors


def _valid_safetensors() -> tuple[dict, bytes]:
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
    }
    return header, struct.pack("<4f", 1, 2, 3, 4)


def _hostile_safetensors() -> dict[str, tuple[bytes, str]]:
    header, data = _valid_safetensors()

    def edit(name: str, **info: object) -> bytes:
        changed = json.loads(json.dumps(header))
        changed[name].update(info)
        return safetensors_bytes(changed, data)

    duplicate = (
        b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        b'"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}'
    )
    deep = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return {
        "overlap": (edit("b", data_offsets=[4, 12]), "overlaps"),
        "identical": (edit("b", data_offsets=[0, 8]), "overlaps"),
        "gap": (safetensors_bytes({"a": header["a"]}, data), "cover 8 bytes of a 16"),
        "duplicate": (safetensors_bytes(None, data, raw_header=duplicate), "appears twice"),
        "dtype_list": (edit("a", dtype=["F32"]), r"dtype \['F32'\]"),
        "dtype_unknown": (edit("a", dtype="F8_E9"), "F8_E9"),
        "shape_true": (edit("a", shape=[True, 2]), "shape"),
        "shape_float": (edit("a", shape=[2.0]), "shape"),
        "shape_huge": (edit("a", shape=[0, 10**12, 10**12]), "multiply past"),
        "shape_overflow": (edit("a", shape=[10**12, 10**12]), "multiply past"),
        "shape_zero_overflow": (
            safetensors_bytes(
                {"z": {"dtype": "F32", "shape": [0, 10**12, 10**12], "data_offsets": [0, 0]}}
            ),
            "multiply past 2\\^63",
        ),
        "offsets_bool": (edit("a", data_offsets=[False, 8]), "data_offsets"),
        "offsets_three": (edit("a", data_offsets=[0, 4, 8]), "data_offsets"),
        "deep": (safetensors_bytes(None, data, raw_header=deep), "nested too deeply|not valid"),
        "not_object": (safetensors_bytes([1, 2], data), "JSON object"),
        "metadata": (safetensors_bytes({**header, "__metadata__": {"k": 1}}, data), "metadata"),
        "header_len": ((2**60).to_bytes(8, "little") + b"{}", "header length"),
        "short": (b"\x01\x02", "too short"),
    }


def test_f8_safetensors_hostile_headers_are_refused(tmp_path: Path) -> None:
    for label, (blob, message) in _hostile_safetensors().items():
        path = tmp_path / f"{label}.safetensors"
        path.write_bytes(blob)
        _rejects(load_safetensors, path, match=message)
    header, data = _valid_safetensors()
    path = tmp_path / "ok.safetensors"
    path.write_bytes(safetensors_bytes(header, data))
    assert load_safetensors(path)["b"].tolist() == [3.0, 4.0]


#: Files the reference reader accepts and ours refuses: a zero-size tensor whose other extents
#: overflow torch's stride computation (the reference returns such a tensor).
STRICTER_THAN_REFERENCE = {"shape_zero_overflow"}


def test_safetensors_reader_rejects_all_the_reference_reader_rejects(tmp_path: Path) -> None:
    """Whatever the ``safetensors`` package refuses, ours refuses; what both accept is equal."""
    reference = pytest.importorskip("safetensors.torch")
    header, data = _valid_safetensors()
    files = {label: blob for label, (blob, _) in _hostile_safetensors().items()}
    files["valid"] = safetensors_bytes(header, data)
    files["empty_tensor"] = safetensors_bytes(
        {"e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}}, b""
    )
    files["trailing"] = safetensors_bytes(header, data + b"\0" * 8)
    files["truncated"] = safetensors_bytes(header, data[:-4])
    save_safetensors({"x": torch.arange(6.0).reshape(2, 3)}, tmp_path / "ours.safetensors")
    files["written_by_us"] = (tmp_path / "ours.safetensors").read_bytes()
    reference_rejected = 0
    for label, blob in files.items():
        path = tmp_path / f"cmp_{label}.safetensors"
        path.write_bytes(blob)
        try:
            theirs = reference.load_file(str(path))
        except Exception:  # the package raises its own SafetensorError and others
            reference_rejected += 1
            with bounded(), pytest.raises(ValueError):
                load_safetensors(path)
            continue
        if label in STRICTER_THAN_REFERENCE:
            with bounded(), pytest.raises(ValueError):
                load_safetensors(path)
            continue
        ours = load_safetensors(path)
        assert ours.keys() == theirs.keys(), label
        for name in ours:
            assert torch.equal(ours[name], theirs[name]), (label, name)
    assert reference_rejected >= 15  # the catalogue really is hostile to the reference too


# ----------------------------------------------------------------------- finding 9: HF directories


def test_f9_shard_paths_are_confined_to_the_checkpoint(tmp_path: Path) -> None:
    directory = hf_llama_dir(tmp_path / "ckpt")
    outside = tmp_path / "outside.safetensors"
    os.replace(directory / "model.safetensors", outside)
    names = list(load_safetensors(outside))
    for target in ("../outside.safetensors", str(outside), "sub/../../outside.safetensors"):
        index = {"weight_map": dict.fromkeys(names, target)}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
        _rejects(load_model, directory, match="shards must be files inside")
    # A shard inside the directory (a subfolder) is fine.
    (directory / "shards").mkdir()
    os.replace(outside, directory / "shards" / "m.safetensors")
    index = {"weight_map": dict.fromkeys(names, "shards/m.safetensors")}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    assert load_model(directory)[0].config.n_layers == 1


def test_f9_config_and_index_of_the_wrong_json_type(tmp_path: Path) -> None:
    directory = hf_llama_dir(tmp_path / "ckpt")
    for text in ("[1, 2]", '"llama"', "3", "null"):
        (directory / "config.json").write_text(text)
        _rejects(load_model, directory, match="config.json: must be a JSON object")
    directory = hf_llama_dir(tmp_path / "ckpt2")
    for text in ("[1]", '{"weight_map": [1]}', '{"weight_map": {"a": 3}}', "{"):
        (directory / "model.safetensors.index.json").write_text(text)
        _rejects(load_model, directory, match="index.json")


def test_f9_a_bad_field_is_named(tmp_path: Path) -> None:
    for field, value in (
        ("hidden_size", "abc"),
        ("vocab_size", [1]),
        ("intermediate_size", 1.5),
        ("rms_norm_eps", "tiny"),
        ("eos_token_id", "2"),
        ("rope_parameters", [1]),
    ):
        fresh = hf_llama_dir(tmp_path / f"ckpt_{field}")
        _edit_config(fresh, **{field: value})
        _rejects(load_model, fresh, match=field)


def test_f9_empty_path_is_named() -> None:
    with pytest.raises(FileNotFoundError, match="the model path is empty"):
        load_model("")
    with pytest.raises(FileNotFoundError, match="the model path is empty"):
        load_hf_dir("")


def test_gguf_loader_keeps_its_old_entry_points(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf")
    config, state = load_gguf(path)
    assert config == TINY and state["tok_emb.weight"].shape == (TINY.vocab_size, TINY.d_model)


def test_gguf_tokenizer_metadata_of_the_wrong_types(tmp_path: Path) -> None:
    base = llama_kv() + [
        ("tokenizer.ggml.model", GGUF_STRING, gstr("gpt2")),
        ("tokenizer.ggml.pre", GGUF_STRING, gstr("smollm")),
    ]
    u32_array = array_header(4, 2) + struct.pack("<2I", 1, 1)
    strings = array_header(GGUF_STRING, 2) + gstr("a") + gstr("b")
    cases = {
        "ints_as_tokens": [("tokenizer.ggml.tokens", GGUF_ARRAY, u32_array)]
        + [("tokenizer.ggml.token_type", GGUF_ARRAY, u32_array)],
        "strings_as_types": [("tokenizer.ggml.tokens", GGUF_ARRAY, strings)]
        + [("tokenizer.ggml.token_type", GGUF_ARRAY, strings)],
        "bos_string": [
            ("tokenizer.ggml.tokens", GGUF_ARRAY, strings),
            ("tokenizer.ggml.token_type", GGUF_ARRAY, u32_array),
            ("tokenizer.ggml.bos_token_id", GGUF_STRING, gstr("1")),
        ],
    }
    for label, extra in cases.items():
        path = tmp_path / f"{label}.gguf"
        path.write_bytes(gguf_bytes(base + extra))
        _rejects(Tokenizer.from_gguf, path, match="tokenizer.ggml")
