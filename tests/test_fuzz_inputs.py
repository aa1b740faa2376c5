"""Fuzzing every input a user hands over: checkpoints, configs, indexes, prompts, flags.

Hypothesis corrupts a valid tiny GGUF and safetensors file byte by byte and field by field,
writes arbitrary ``config.json`` and ``model.safetensors.index.json`` contents, and draws bad
API and command-line arguments. The contract under test: every case ends within a few seconds
and under a memory cap (:func:`hostile_support.bounded`: 5 s, +1 GiB of address space), either
succeeding or raising a clear ``ValueError`` / ``FileNotFoundError`` (exit status 2 for the
CLI); never another exception, a hang or a large allocation.

Example counts follow the Hypothesis profile (tests/conftest.py: ``ci`` is derandomized); the
files are written into one temporary folder per test, overwritten per example.
"""

from __future__ import annotations

import json
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hostile_support import TINY, bounded, hf_llama_dir, safetensors_bytes, write_tiny_gguf
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from casspec_ref.config import tiny_llama
from casspec_ref.generate import generate_ar
from casspec_ref.io.gguf import GGUFFile
from casspec_ref.io.safetensors_io import DTYPES, load_safetensors
from casspec_ref.io.tokenizer import Tokenizer
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import generate_speculative
from casspec_ref.tools import cli

CLEAR_ERRORS = (ValueError, FileNotFoundError)
FUZZ = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _outcome(call: Callable[[], Any]) -> str:
    """Run ``call`` bounded: "ok" or "error: ..." for a clear error; anything else fails."""
    with bounded():
        try:
            call()
        except CLEAR_ERRORS as err:
            message = str(err)
            assert message and "Traceback" not in message and len(message) < 4000
            event(f"{type(err).__name__}")
            return "error: " + message
    event("ok")
    return "ok"


@pytest.fixture(scope="module")
def workdir() -> Any:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


class Blob(bytes):
    """File contents with a short repr (Hypothesis prints the arguments of a failure)."""

    def __repr__(self) -> str:
        return f"<{len(self)} bytes>"


@pytest.fixture(scope="module")
def good_gguf(workdir: Path) -> Blob:
    small = tiny_llama(
        vocab_size=TINY.vocab_size, d_model=16, n_heads=2, n_kv_heads=1, d_ff=16, n_layers=1
    )
    path = write_tiny_gguf(workdir / "good.gguf", small)
    # Loading once imports what torch imports lazily (seconds, once), outside the bounded cases.
    model, _ = load_model(path)
    generate_speculative(model, [3, 4, 5], 2, method="cas-spec")
    return Blob(path.read_bytes())


def _header_size(blob: bytes) -> int:
    """Bytes of the GGUF header (metadata + tensor table), where corruption is interesting."""
    return min(t.start for t in GGUFFile_from_bytes(blob).tensors.values())


def GGUFFile_from_bytes(blob: bytes) -> GGUFFile:  # noqa: N802 - mirrors the class name
    with tempfile.NamedTemporaryFile(suffix=".gguf") as handle:
        handle.write(blob)
        handle.flush()
        return GGUFFile(handle.name)


# ----------------------------------------------------------------------- GGUF


@FUZZ
@given(data=st.data())
def test_fuzz_corrupted_gguf(workdir: Path, good_gguf: Blob, data: st.DataObject) -> None:
    header = _header_size(good_gguf)
    blob = bytearray(good_gguf)
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        if not blob:
            break
        kind = data.draw(st.sampled_from(["byte", "u64", "u32", "truncate", "insert"]))
        at = min(data.draw(st.integers(0, header - 1), label="at"), len(blob) - 1)
        if kind == "byte":
            blob[at] = data.draw(st.integers(0, 255))
        elif kind in ("u64", "u32"):
            fmt = "<Q" if kind == "u64" else "<I"
            top = 2**64 - 1 if kind == "u64" else 2**32 - 1
            value = data.draw(st.one_of(st.integers(0, 64), st.integers(0, top)))
            blob[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
        elif kind == "truncate":
            del blob[data.draw(st.integers(0, len(blob) - 1)) :]
        else:
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    path = workdir / "fuzz.gguf"
    path.write_bytes(bytes(blob))
    _outcome(lambda: load_model(path, memory_budget=1 << 30))
    _outcome(lambda: Tokenizer.from_gguf(path))


# ----------------------------------------------------------------------- safetensors

_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(-3, 2**40), max_size=3),
)
_entry = st.fixed_dictionaries(
    {
        "dtype": st.one_of(st.sampled_from(sorted(DTYPES)), _junk),
        "shape": st.one_of(st.lists(st.integers(0, 4), max_size=3), _junk),
        "data_offsets": st.one_of(st.lists(st.integers(0, 64), min_size=2, max_size=2), _junk),
    }
)


def _reference_reader() -> Any:
    try:
        import safetensors.torch
    except ImportError:
        return None
    return safetensors.torch


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@FUZZ
@given(
    tensors=st.lists(
        st.tuples(st.sampled_from(sorted(DTYPES)), st.lists(st.integers(0, 3), max_size=3)),
        max_size=4,
    ),
    edits=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.sampled_from(["dtype", "shape", "data_offsets", "begin", "end", "drop", "copy"]),
            _junk,
            st.integers(-9, 9),
        ),
        max_size=2,
    ),
    extra=st.integers(-3, 3),
)
def test_fuzz_safetensors_headers(workdir: Path, tensors, edits, extra) -> None:
    """Nearly valid headers (tiled offsets, then up to two edits); where the reference
    ``safetensors`` package is installed, ours must reject whatever it rejects, and agree on
    what both accept."""
    header: dict[str, Any] = {}
    position = 0
    for index, (dtype, shape) in enumerate(tensors):
        size = int(np.prod(shape)) * torch.empty((), dtype=DTYPES[dtype]).element_size()
        header[f"t{index}"] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [position, position + size],
        }
        position += size
    names = sorted(header)
    for which, field, junk, delta in edits:
        if not names:
            break
        name = names[which % len(names)]
        entry = header[name]
        offsets = entry["data_offsets"]
        if field in ("dtype", "shape", "data_offsets"):
            entry[field] = junk
        elif field in ("begin", "end") and isinstance(offsets, list) and len(offsets) == 2:
            offsets[field == "end"] += delta
        elif field == "drop":
            del header[name]
            names.remove(name)
        elif field == "copy" and isinstance(header[names[0]]["data_offsets"], list):
            entry["data_offsets"] = list(header[names[0]]["data_offsets"])
    data = bytes(range(256)) * (position // 256 + 1)
    path = workdir / "fuzz.safetensors"
    path.write_bytes(safetensors_bytes(header, data[: max(0, position + extra)]))
    ours = _outcome(lambda: load_safetensors(path))
    reference = _reference_reader()
    if reference is None:
        return
    try:
        theirs = reference.load_file(str(path))
    except Exception:  # the reference refused: so must we
        assert ours != "ok", header
        return
    if ours == "ok":
        loaded = load_safetensors(path)
        assert loaded.keys() == theirs.keys()
        # Bit for bit: the fuzzed bytes include NaN patterns, which `torch.equal` never matches.
        assert all(same_bits(loaded[k], theirs[k]) for k in loaded)


@FUZZ
@given(raw=st.binary(max_size=96), length=st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_fuzz_safetensors_bytes(workdir: Path, raw: bytes, length: int | None) -> None:
    size = len(raw) if length is None else length
    path = workdir / "raw.safetensors"
    path.write_bytes(struct.pack("<Q", size) + raw)
    _outcome(lambda: load_safetensors(path))


# ----------------------------------------------------------------------- config.json, index.json

_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**66), 2**66),
        st.floats(allow_nan=False),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_CONFIG_KEYS = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_parameters",
    "rope_scaling",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "head_dim",
    "hidden_act",
]


@pytest.fixture(scope="module")
def hf_dir(workdir: Path) -> Path:
    return hf_llama_dir(workdir / "hf")


@FUZZ
@given(
    edits=st.dictionaries(st.sampled_from(_CONFIG_KEYS), _json, min_size=1, max_size=3),
    whole=st.one_of(st.none(), _json),
)
def test_fuzz_config_json(hf_dir: Path, edits: dict, whole: Any) -> None:
    original = (hf_dir / "config.json").read_text()
    try:
        cfg = json.loads(original)
        cfg.update(edits)
        (hf_dir / "config.json").write_text(json.dumps(cfg if whole is None else whole))
        _outcome(lambda: load_model(hf_dir, memory_budget=1 << 30))
    finally:
        (hf_dir / "config.json").write_text(original)


_shard_name = st.one_of(
    st.sampled_from(
        ["model.safetensors", "../hf/model.safetensors", "/etc/passwd", "", ".", "..", "a/../b"]
    ),
    st.text(alphabet="./ab\\:", max_size=12),
)


@FUZZ
@given(
    weight_map=st.one_of(st.dictionaries(st.text(max_size=8), _shard_name, max_size=3), _json),
    wrap=st.booleans(),
)
def test_fuzz_index_json(hf_dir: Path, weight_map: Any, wrap: bool) -> None:
    index = hf_dir / "model.safetensors.index.json"
    try:
        index.write_text(json.dumps({"weight_map": weight_map} if wrap else weight_map))
        result = _outcome(lambda: load_model(hf_dir))
        if result == "ok":  # then every shard named was a file inside the directory
            names = set(weight_map.values())
            assert all(".." not in Path(n).parts and not Path(n).is_absolute() for n in names)
    finally:
        index.unlink()


# ----------------------------------------------------------------------- API and CLI arguments

_MODEL = tiny_llama(vocab_size=32, max_seq_len=64)
_prompt = st.one_of(
    st.lists(st.integers(0, 31), min_size=1, max_size=8),  # valid, so later checks are reached
    st.lists(st.one_of(st.integers(-5, 40), st.booleans(), st.floats(0, 40)), max_size=8),
    st.builds(
        lambda ids, dtype, rows: torch.tensor([ids] * rows, dtype=dtype),
        st.lists(st.integers(0, 31), min_size=1, max_size=6),
        st.sampled_from([torch.long, torch.int32, torch.uint8, torch.float32, torch.bool]),
        st.integers(1, 2),
    ),
    st.builds(lambda ids: np.array(ids), st.lists(st.integers(-1, 33), max_size=6)),
    st.text(max_size=4),
)


@pytest.fixture(scope="module")
def api_model() -> torch.nn.Module:
    from hostile_support import tiny_model

    return tiny_model(_MODEL)


@FUZZ
@given(
    prompt=_prompt,
    max_new=st.one_of(st.integers(0, 6), st.integers(-2, 6), st.sampled_from([10**9, 2.0, True])),
    temperature=st.sampled_from([0.0, 0.0, 0.7, 1.0, -1.0, float("nan"), float("inf")]),
    top_k=st.one_of(st.just(0), st.integers(-2, 40), st.just(2.5)),
    top_p=st.one_of(st.just(1.0), st.floats(-0.5, 1.5), st.just(float("nan"))),
    stop=st.lists(st.integers(0, 31), max_size=2) | st.lists(st.integers(-2, 40), max_size=3),
    method=st.sampled_from(["ar-loop", "pld", "vc", "cas-spec"]),
    rng=st.sampled_from([None, None, None, "object"]),
)
def test_fuzz_generation_arguments(
    api_model, prompt, max_new, temperature, top_k, top_p, stop, method, rng
) -> None:
    kwargs: dict[str, Any] = dict(
        temperature=temperature, top_k=top_k, top_p=top_p, stop_ids=stop, seed=None
    )
    if rng == "object":
        kwargs["rng"] = object()
    if method == "ar-loop":
        result = _outcome(lambda: generate_ar(api_model, prompt, max_new, **kwargs))
    else:
        result = _outcome(
            lambda: generate_speculative(api_model, prompt, max_new, method=method, **kwargs)
        )
    # What the check must refuse, it refuses (never silently converted).
    if isinstance(prompt, torch.Tensor) and (prompt.dtype in (torch.float32, torch.bool)):
        assert result.startswith("error")
    if isinstance(prompt, torch.Tensor) and prompt.shape[0] == 2:
        assert result.startswith("error")
    if isinstance(prompt, str) or (isinstance(prompt, list) and not prompt):
        assert result.startswith("error")


@pytest.fixture(scope="module")
def cli_model(workdir: Path) -> Path:
    return write_tiny_gguf(workdir / "cli.gguf")


_flag_values = {
    "--method": st.sampled_from(["ar", "pld", "vc", "cas-spec", "nope", ""]),
    "--max-new-tokens": st.sampled_from(["0", "3", "5", "-1", "99999", "x", "1e3"]),
    "--temperature": st.sampled_from(["0", "0.8", "1", "-1", "nan", "inf", "5e-324", "hot"]),
    "--top-k": st.sampled_from(["0", "3", "5", "-4", "1.5"]),
    "--top-p": st.sampled_from(["1", "0.5", "0.9", "0", "2", "nan"]),
    "--seed": st.sampled_from(["0", "-1", str(10**26), "s"]),
    "--dtype": st.sampled_from(["float32", "float64", "int8"]),
    "--device": st.sampled_from(["cpu", "tpu", "cuda:99"]),
    "--memory-budget": st.sampled_from(["1G", "1", "-3", "many", "1T"]),
    "--max-context": st.sampled_from(["0", "16", "128", "-2"]),
}


@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)  # capsys is read out at the start and end of every example
@given(
    flags=st.dictionaries(st.sampled_from(sorted(_flag_values)), st.just(None), max_size=3),
    data=st.data(),
    prompt=st.text(max_size=12),
    switches=st.sets(st.sampled_from(["--raw", "--json", "--show-tree"])),
)
def test_fuzz_cli_generate(cli_model, flags, data, prompt, switches, capsys) -> None:
    argv = ["generate", "--model", str(cli_model)]
    for flag in flags:
        argv += [flag, data.draw(_flag_values[flag], label=flag)]
    argv += sorted(switches) + ["--", prompt]
    capsys.readouterr()
    with bounded():
        try:
            status = cli.main(argv)
        except SystemExit as exit_:  # argparse: a value of the wrong type
            status = exit_.code
    captured = capsys.readouterr()
    event(f"exit {status}")
    assert status in (0, 2), (argv, captured.err)
    assert "Traceback" not in captured.err
    if status == 2:
        assert captured.err.strip(), argv  # a message says what was wrong
    if status == 0 and "--json" in switches:
        json.loads(captured.out)
