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
- The whole file is read into memory (checkpoints here are at most a few hundred MB); each
  tensor is then copied out, so the returned tensors own their storage and are writable.
- ``BF16`` needs nothing special: ``torch.frombuffer`` reads bfloat16 directly.
- Every structural problem (short file, bad JSON, offsets outside the buffer, a byte count that
  does not match dtype and shape, an unknown dtype) raises ``ValueError`` naming the file and the
  tensor, never a low-level traceback.
- The writer pads the header with spaces to a multiple of 8 bytes, as the reference writer does,
  so that every tensor starts aligned.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Mapping
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


def load_safetensors_with_metadata(
    path: str | Path,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a ``.safetensors`` file: its tensors and its ``__metadata__`` string map."""
    _check_little_endian()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"safetensors file not found: {path}")
    blob = path.read_bytes()
    if len(blob) < 8:
        raise ValueError(f"{path}: {len(blob)} bytes is too short for a safetensors file (>= 8)")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if header_len > _MAX_HEADER_BYTES or 8 + header_len > len(blob):
        raise ValueError(
            f"{path}: header length {header_len} does not fit in a file of {len(blob)} bytes "
            "(truncated or not a safetensors file)"
        )
    try:
        header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: the header is not valid UTF-8 JSON ({err})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header must be a JSON object, got {type(header).__name__}")

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError(f"{path}: __metadata__ must map strings to strings")

    data = memoryview(blob)[8 + header_len :]
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        tensors[name] = _read_tensor(path, name, info, data)
    return tensors, dict(metadata)


def _read_tensor(path: Path, name: str, info: object, data: memoryview) -> torch.Tensor:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise ValueError(f"{path}: entry {name!r} needs 'dtype', 'shape' and 'data_offsets'")
    dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype_name not in DTYPES:
        raise ValueError(
            f"{path}: tensor {name!r} has dtype {dtype_name!r}; supported: {sorted(DTYPES)}"
        )
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ValueError(f"{path}: tensor {name!r} has an invalid shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1] <= len(data)
    ):
        raise ValueError(
            f"{path}: tensor {name!r} has data_offsets {offsets!r} outside the "
            f"{len(data)}-byte data buffer (truncated file?)"
        )
    dtype = DTYPES[dtype_name]
    itemsize = torch.empty((), dtype=dtype).element_size()
    expected = math.prod(shape) * itemsize
    begin, end = offsets
    if end - begin != expected:
        raise ValueError(
            f"{path}: tensor {name!r} ({dtype_name}, shape {shape}) needs {expected} bytes "
            f"but data_offsets span {end - begin}"
        )
    if expected == 0:
        return torch.empty(shape, dtype=dtype)
    # bytearray: torch.frombuffer wants a writable buffer, and the copy gives the tensor its
    # own storage instead of pinning the whole file in memory.
    flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)  # (numel,)
    return flat.reshape(shape)  # (numel,) -> shape


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
