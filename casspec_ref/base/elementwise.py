"""Elementwise functions whose every element is computed by the same code, whatever the shape.

torch's CPU kernels for ``silu``, ``sigmoid``, ``exp``, ``tanh`` and the like run a vectorized
loop over two vectors at a time and finish what is left of the tensor with scalar code; a
multi-threaded call cuts the tensor into one such loop per thread. The scalar code and the vector
code compute a transcendental function differently, so they round differently. Which elements of
a row fall into a scalar remainder depends on the tensor's total size and the thread split, i.e.
on the forward's row count: the same row comes out in other bits alone than among others
(docs/floating_point.md, "The scalar tail").

`rowwise` removes both causes by construction: each call's buffer holds whole rows whose length
is a multiple of `VECTOR_CHUNK` (the widest two-vector step of any dispatch level: 16 floats on
the default and AVX2 levels, 32 floats or 64 bfloat16 on AVX-512), so no element is left to the
scalar code; and no call exceeds `SERIAL_ELEMENTS`, the size below which torch runs an elementwise
loop on one thread, so no thread split cuts a row.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

#: A multiple of every dispatch level's two-vector step, in elements of any dtype up to 4 bytes.
VECTOR_CHUNK = 64
#: torch's ``at::internal::GRAIN_SIZE``: an elementwise call over fewer elements runs on one thread.
SERIAL_ELEMENTS = 32768


def rowwise(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for an elementwise ``fn``, every element computed by the vector code: the rows
    (last axis) zero-padded to a multiple of `VECTOR_CHUNK`, and at most `SERIAL_ELEMENTS` per
    call (a row wider than that runs alone; no model here has one). ``x (..., D)``; returns
    ``(..., D)``."""
    width = x.shape[-1]
    rows = x.reshape(-1, width)  # (N, D)
    if width % VECTOR_CHUNK or not rows.is_contiguous():
        rows = F.pad(rows, (0, -width % VECTOR_CHUNK)).contiguous()  # (N, D'), D' % 64 == 0
    per_call = max(1, SERIAL_ELEMENTS // rows.shape[1])
    if rows.shape[0] <= per_call:
        out = fn(rows)
    else:
        out = torch.cat([fn(rows[s : s + per_call]) for s in range(0, rows.shape[0], per_call)])
    return out[:, :width].reshape(x.shape)  # (..., D)
