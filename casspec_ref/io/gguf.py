"""The project's own GGUF reader: header, metadata, tensor table, all checked before use.

Scope: parse a ``.gguf`` file (versions 2 and 3, little-endian) into its key/value metadata and
its tensor table, and hand out each tensor's raw bytes as a read-only numpy view of a memory
map. ``weights.py`` turns those bytes into float tensors; ``tokenizer.py`` reads the metadata.
Nothing in the file is trusted: a checkpoint is user input.

The layout (the GGUF specification, ggml's ``docs/gguf.md``):

- magic ``GGUF``, u32 version, u64 tensor count, u64 key/value count;
- per key: a string (u64 byte length + UTF-8), a u32 value type and the value. Scalars are
  fixed-size; strings as above; arrays are a u32 item type, a u64 count, then the items
  (arrays may nest);
- per tensor: its name (a string), a u32 number of dimensions, that many u64 extents (innermost
  first, ``ne0``), a u32 ggml type and a u64 offset into the data section;
- the data section starts at the next multiple of ``general.alignment`` (default 32) after the
  tensor table; every offset is a multiple of it too.

Why not ``gguf.GGUFReader``: it turns each metadata array into numpy views up front, so a 1 KB
file declaring a 2^40-item array makes it allocate until memory runs out, and on the embedded
SmolLM2 it spends seconds on the 49k tokenizer strings. Here every count is checked against the
bytes left in the file *before* anything is built from it:

- an array of ``count`` items needs at least ``count * (smallest item size)`` bytes, checked
  before the items are read; arrays nest at most :data:`MAX_NESTING` deep;
- the key/value and tensor counts are bounded by the bytes left (each entry needs >= 12 bytes);
- a tensor's byte size follows from its extents and type (block size and bytes per block);
  its ``[offset, offset + size)`` range must lie inside the file, ranges must not overlap, names
  must be unique, and dimensions must be 1..4 extents >= 1 with < 2^63 elements in all.

Tensor types this module can size: the float and integer types, the legacy, K- and I-quants
(:data:`GGML_TYPES`, checked against the ``gguf`` package's table in the tests); another type id
raises ``ValueError`` naming the tensor. Which types can be *decoded* is ``weights.py``'s
business.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Deepest nesting of arrays accepted in metadata (real files use 1: arrays of scalars/strings).
MAX_NESTING = 3
#: Most dimensions a tensor may declare (ggml's GGML_MAX_DIMS).
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32

# Value types: id -> (struct format, name). 8 = string, 9 = array.
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("B", "uint8"),
    1: ("b", "int8"),
    2: ("H", "uint16"),
    3: ("h", "int16"),
    4: ("I", "uint32"),
    5: ("i", "int32"),
    6: ("f", "float32"),
    7: ("?", "bool"),
    10: ("Q", "uint64"),
    11: ("q", "int64"),
    12: ("d", "float64"),
}
_STRING, _ARRAY = 8, 9

# ggml tensor types: id -> (name, elements per block, bytes per block); ggml's ggml.h/ggml.c.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
}


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of the tensor table, validated against the file.

    Attributes:
        name: the tensor's GGUF name (e.g. ``blk.0.attn_q.weight``).
        shape: extents in torch order (outermost first: GGUF lists ``ne0`` first).
        type_name: the ggml type's name (``"Q4_1"``...).
        start: absolute byte position of the data in the file.
        n_bytes: byte size of the data.
    """

    name: str
    shape: tuple[int, ...]
    type_name: str
    start: int
    n_bytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


class GGUFFile:
    """A parsed GGUF file: ``metadata`` (key -> value), ``tensors`` (name -> info), and the
    raw bytes of a tensor through :meth:`tensor_bytes` (a read-only view of a memory map)."""

    def __init__(self, path: str | Path, metadata_only: bool = False) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {self.path}")
        self.size = self.path.stat().st_size
        self._map: mmap.mmap | None = None
        if self.size == 0:
            raise ValueError(f"GGUF file {self.path}: the file is empty")
        with self.path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            parser = _Parser(self._map)
            self.version, self.metadata, self.tensors = parser.parse(metadata_only)
            self.data_start = parser.data_start
        except (struct.error, UnicodeDecodeError) as err:
            raise ValueError(f"GGUF file {self.path}: truncated or corrupted ({err})") from None
        except ValueError as err:
            raise ValueError(f"GGUF file {self.path}: {err}") from None

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw bytes of tensor ``name`` as a read-only uint8 array (no copy)."""
        info = self.tensors[name]
        assert self._map is not None
        return np.frombuffer(self._map, dtype=np.uint8, count=info.n_bytes, offset=info.start)


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (its tensor table is not parsed)."""
    return GGUFFile(path, metadata_only=True).metadata


class _Parser:
    """Cursor over the file's bytes; every read is bounds-checked by ``struct``."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.size = len(data)
        self.offset = 0
        self.data_start = 0

    def left(self) -> int:
        return self.size - self.offset

    def unpack(self, fmt: str) -> Any:
        values = struct.unpack_from("<" + fmt, self.data, self.offset)
        self.offset += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def string(self, what: str) -> str:
        length = self.unpack("Q")
        if length > self.left():
            raise ValueError(
                f"{what}: a string of {length} bytes at byte {self.offset - 8} runs past the end "
                f"of the {self.size}-byte file"
            )
        raw = bytes(self.data[self.offset : self.offset + length])
        self.offset += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            at = self.offset - length
            raise ValueError(f"{what}: a string at byte {at} is not UTF-8") from None

    def value(self, kind: int, key: str, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind][0])
        if kind == _STRING:
            return self.string(f"metadata {key!r}")
        if kind != _ARRAY:
            raise ValueError(f"metadata {key!r} has unknown value type {kind} (byte {self.offset})")
        if depth >= MAX_NESTING:
            raise ValueError(f"metadata {key!r}: arrays nested deeper than {MAX_NESTING} levels")
        item_kind, count = self.unpack("IQ")
        smallest = struct.calcsize("<" + _SCALARS[item_kind][0]) if item_kind in _SCALARS else 8
        if item_kind not in _SCALARS and item_kind not in (_STRING, _ARRAY):
            raise ValueError(f"metadata {key!r}: array of unknown value type {item_kind}")
        if item_kind == _ARRAY:
            smallest = 12  # item type + count of an empty inner array
        if count * smallest > self.left():
            raise ValueError(
                f"metadata {key!r}: an array of {count} items needs at least "
                f"{count * smallest} bytes, but only {self.left()} are left in the file"
            )
        if item_kind in _SCALARS and item_kind != 7:
            fmt = f"<{count}{_SCALARS[item_kind][0]}"
            values = list(struct.unpack_from(fmt, self.data, self.offset))
            self.offset += struct.calcsize(fmt)
            return values
        return [self.value(item_kind, key, depth + 1) for _ in range(count)]

    def parse(self, metadata_only: bool) -> tuple[int, dict[str, Any], dict[str, GGUFTensorInfo]]:
        magic = bytes(self.data[:4])
        if magic != b"GGUF":
            raise ValueError(f"not a GGUF file (magic {magic!r}, expected b'GGUF')")
        self.offset = 4
        version, n_tensors, n_kv = self.unpack("IQQ")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not supported (2 or 3)")
        for what, count in (("key/value pairs", n_kv), ("tensors", n_tensors)):
            if count * 12 > self.left():  # a key or a tensor entry takes >= 12 bytes
                raise ValueError(
                    f"the header declares {count} {what}, more than the {self.size}-byte file "
                    "can hold"
                )
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self.string("a metadata key")
            if key in metadata:
                raise ValueError(f"metadata key {key!r} appears twice")
            metadata[key] = self.value(self.unpack("I"), key)
        if metadata_only:
            return version, metadata, {}
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            isinstance(alignment, bool)
            or not isinstance(alignment, int)
            or not (0 < alignment <= 1 << 20 and alignment & (alignment - 1) == 0)
        ):
            raise ValueError(f"general.alignment={alignment!r}: must be a power of two <= 2^20")
        table: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name = self.string("a tensor name")
            n_dims = self.unpack("I")
            if not 1 <= n_dims <= MAX_DIMS:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions; allowed 1..{MAX_DIMS}")
            dims = self.unpack(f"{n_dims}Q")
            dims = (dims,) if n_dims == 1 else tuple(dims)
            type_id, offset = self.unpack("IQ")
            table.append((name, tuple(reversed(dims)), type_id, offset))
        self.data_start = -(-self.offset // alignment) * alignment
        tensors: dict[str, GGUFTensorInfo] = {}
        for name, shape, type_id, offset in table:
            if name in tensors:
                raise ValueError(f"tensor {name!r} appears twice in the tensor table")
            tensors[name] = self._tensor_info(name, shape, type_id, offset, alignment)
        spans = sorted((t.start, t.start + t.n_bytes, t.name) for t in tensors.values())
        for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
            if start < end:
                raise ValueError(f"tensors {first!r} and {second!r} overlap in the data section")
        return version, metadata, tensors

    def _tensor_info(
        self, name: str, shape: tuple[int, ...], type_id: int, offset: int, alignment: int
    ) -> GGUFTensorInfo:
        if any(d < 1 for d in shape):
            raise ValueError(f"tensor {name!r} has shape {list(shape)}; extents must be >= 1")
        n_elements = math.prod(shape)
        if n_elements >= 1 << 63:
            raise ValueError(f"tensor {name!r} declares {n_elements} elements (>= 2^63)")
        if type_id not in GGML_TYPES:
            raise ValueError(f"tensor {name!r} has unknown ggml type id {type_id}")
        type_name, block_elems, block_bytes = GGML_TYPES[type_id]
        if shape[-1] % block_elems != 0:
            raise ValueError(
                f"tensor {name!r}: row length {shape[-1]} is not a multiple of the {type_name} "
                f"block size {block_elems}"
            )
        n_bytes = n_elements // block_elems * block_bytes
        if offset % alignment != 0:
            raise ValueError(
                f"tensor {name!r}: offset {offset} is not a multiple of the alignment {alignment}"
            )
        start = self.data_start + offset
        if start + n_bytes > self.size:
            raise ValueError(
                f"tensor {name!r} ({type_name}, shape {list(shape)}) needs bytes "
                f"{start}..{start + n_bytes} but the file has {self.size} (truncated?)"
            )
        return GGUFTensorInfo(name, shape, type_name, start, n_bytes)
