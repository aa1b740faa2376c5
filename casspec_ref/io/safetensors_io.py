"""A tiny reader and writer of the safetensors format, with no dependency beyond torch.

Scope: load and save ``dict[str, torch.Tensor]`` in the format Hugging Face checkpoints use, so
that ``weights.py`` can read ``*.safetensors`` without the ``safetensors`` package and without
ever unpickling anything (``torch.load`` of a ``.bin`` checkpoint would run pickle).

The format (https://github.com/huggingface/safetensors, "Format" section of its README):

- 8 bytes: ``N``, an unsigned little-endian 64-bit integer, the size of the header;
- ``N`` bytes: a UTF-8 JSON object ``{name: {"dtype": str, "shape": [int, ...],
  "data_offsets": [begin, end]}, ...}`` plus an optional ``"__metadata__": {str: str}`` entry;
- the rest: the raw little-endian tensor bytes, row-major; ``data_offsets`` are relative to the
  start of this byte buffer.

Notable choices:
- The returned tensors own their storage and are writable.
- ``BF16`` needs nothing special: ``torch.frombuffer`` reads bfloat16 directly.
- The header is validated before any tensor memory is allocated, with the rules of the
  reference reader (the ``safetensors`` package; ``tests/test_hostile_io.py`` compares the two
  on hostile files): a header of at most 100 MB starting with ``{``; no duplicate names; a
  ``dtype`` string from the table below; a shape of integers >= 0; ``data_offsets`` of two
  integers whose span is exactly ``numel * itemsize``; and the tensors, sorted by offset, must
  tile the data buffer exactly (no overlap, no two names on one range, no gap, nothing left
  over). Every violation raises ``ValueError`` naming the file and the tensor, never a
  low-level traceback (JSON nested too deeply included).
- Tensors are read one by one from the open file, so memory holds one copy of each tensor,
  not the whole file.
- The writer pads the header with spaces to a multiple of 8 bytes, as the reference writer does,
  so that every tensor starts aligned.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

# safetensors dtype names <-> torch dtypes (the subset a model checkpoint can contain).
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}

# A header larger than this is certainly a corrupted length field (the reference reader uses
# the same 100 MB bound).
_MAX_HEADER_BYTES = 100_000_000


def _check_little_endian() -> None:
    # The format is little-endian and we reinterpret bytes in place; a big-endian host would
    # need byte swapping, which this tiny reader does not do.
    if sys.byteorder != "little":
        raise RuntimeError("safetensors_io supports little-endian hosts only")


def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Read every tensor of a ``.safetensors`` file (on CPU, in its stored dtype)."""
    tensors, _ = load_safetensors_with_metadata(path)
    return tensors


@dataclass(frozen=True)
class SafetensorsEntry:
    """One tensor of a safetensors header: dtype name, shape, byte range in the data buffer."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _reject_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"the name {key!r} appears twice in one JSON object")
        seen[key] = value
    return seen


def read_safetensors_header(
    path: str | Path,
) -> tuple[dict[str, SafetensorsEntry], dict[str, str], int]:
    """Parse and validate the header of a ``.safetensors`` file without reading tensor data.

    Returns ``(entries, metadata, data_start)``. Raises ``ValueError`` naming the file and the
    entry for every rule of the format the reference reader enforces (see the module
    docstring), before any tensor memory is allocated.
    """
    _check_little_endian()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"safetensors file not found: {path}")
    size = path.stat().st_size
    if size < 8:
        raise ValueError(f"{path}: {size} bytes is too short for a safetensors file (>= 8)")
    with path.open("rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
        if header_len > _MAX_HEADER_BYTES or 8 + header_len > size:
            raise ValueError(
                f"{path}: header length {header_len} does not fit in a file of {size} bytes "
                f"(at most {_MAX_HEADER_BYTES}; truncated or not a safetensors file)"
            )
        raw = handle.read(header_len)
    if not raw.startswith(b"{"):
        raise ValueError(f"{path}: the header must be a JSON object starting with '{{'")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicate_keys)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: the header is not valid UTF-8 JSON ({err})") from None
    except RecursionError:
        raise ValueError(f"{path}: the header JSON is nested too deeply") from None
    except ValueError as err:  # a duplicate name
        raise ValueError(f"{path}: {err}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header must be a JSON object, got {type(header).__name__}")

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError(f"{path}: __metadata__ must map strings to strings")
    data_len = size - 8 - header_len
    entries = {name: _entry(path, name, info) for name, info in header.items()}
    # The data buffer must be covered exactly: entries sorted by offset, each starting where
    # the previous one ended (no gap, no overlap, no two names on one range), the last one
    # ending at the end of the file.
    position = 0
    for name, entry in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
        if entry.begin != position:
            problem = "overlaps the previous tensor" if entry.begin < position else "leaves a gap"
            raise ValueError(
                f"{path}: tensor {name!r} starts at data offset {entry.begin} and {problem} "
                f"(expected {position}); tensors must tile the data buffer without overlap"
            )
        position = entry.end
    if position != data_len:
        raise ValueError(
            f"{path}: the tensors cover {position} bytes of a {data_len}-byte data buffer "
            "(truncated file, or bytes no tensor accounts for)"
        )
    return entries, dict(metadata), 8 + header_len


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(path: Path, name: str, info: object) -> SafetensorsEntry:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise ValueError(f"{path}: entry {name!r} needs 'dtype', 'shape' and 'data_offsets'")
    dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise ValueError(
            f"{path}: tensor {name!r} has dtype {dtype_name!r}; supported: {sorted(DTYPES)}"
        )
    if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
        raise ValueError(
            f"{path}: tensor {name!r} has shape {str(shape)[:80]}; a shape is a list of "
            "integers >= 0"
        )
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise ValueError(
            f"{path}: tensor {name!r} has data_offsets {str(offsets)[:80]}; expected "
            "[begin, end], two integers"
        )
    if math.prod(max(d, 1) for d in shape) >= 2**63:
        # Even with a zero extent, torch computes strides from the other extents.
        raise ValueError(
            f"{path}: tensor {name!r} has shape {shape[:8]}: its extents multiply past 2^63"
        )
    begin, end = offsets
    if not 0 <= begin <= end:
        raise ValueError(f"{path}: tensor {name!r}: data_offsets {offsets} need 0 <= begin <= end")
    itemsize = torch.empty((), dtype=DTYPES[dtype_name]).element_size()
    expected = math.prod(shape) * itemsize
    if end - begin != expected:
        raise ValueError(
            f"{path}: tensor {name!r} ({dtype_name}, shape {shape}) needs {expected} bytes "
            f"but data_offsets span {end - begin}"
        )
    return SafetensorsEntry(dtype_name, tuple(shape), begin, end)


def load_safetensors_with_metadata(
    path: str | Path,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a ``.safetensors`` file: its tensors and its ``__metadata__`` string map."""
    entries, metadata, data_start = read_safetensors_header(path)
    tensors: dict[str, torch.Tensor] = {}
    with Path(path).open("rb") as handle:
        for name, entry in entries.items():
            dtype = DTYPES[entry.dtype]
            if entry.end == entry.begin:
                tensors[name] = torch.empty(entry.shape, dtype=dtype)
                continue
            handle.seek(data_start + entry.begin)
            # bytearray: torch.frombuffer wants a writable buffer; each tensor owns its storage.
            raw = bytearray(handle.read(entry.end - entry.begin))
            flat = torch.frombuffer(raw, dtype=dtype)  # (numel,)
            tensors[name] = flat.reshape(entry.shape)  # (numel,) -> shape
    return tensors, metadata


def save_safetensors(
    tensors: Mapping[str, torch.Tensor],
    path: str | Path,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` (moved to CPU, made contiguous) to ``path`` in safetensors format."""
    _check_little_endian()
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"value for {name!r} is a {type(tensor).__name__}, not a Tensor")
        if tensor.dtype not in _NAMES:
            raise ValueError(
                f"tensor {name!r} has dtype {tensor.dtype}; supported: "
                f"{sorted(str(d) for d in _NAMES)}"
            )
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)  # shape -> (numel,)
        raw = flat.view(torch.uint8).numpy().tobytes()  # (numel,) -> (numel * itemsize,) bytes
        header[name] = {
            "dtype": _NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # align the data buffer to 8 bytes
    with Path(path).open("wb") as handle:
        handle.write(struct.pack("<Q", len(header_bytes)))
        handle.write(header_bytes)
        for raw in chunks:
            handle.write(raw)
