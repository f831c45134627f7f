"""The NCCL double's vocabulary: NCCL's enums, its errors, one call as every rank makes it.

Split from ``fake_nccl.py`` (the API and the communicator): what a checked call carries (its
signature, the bytes it sends, how it writes what every rank sent) and the arithmetic of a
reduction in NCCL's datatype.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tests.support import fake_streams

# NCCL's enums, with cupy.cuda.nccl's names and values.
NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4
TYPES: dict[int, tuple[str, np.dtype]] = {
    0: ("INT8", np.dtype(np.int8)),
    1: ("UINT8", np.dtype(np.uint8)),
    2: ("INT32", np.dtype(np.int32)),
    3: ("UINT32", np.dtype(np.uint32)),
    4: ("INT64", np.dtype(np.int64)),
    5: ("UINT64", np.dtype(np.uint64)),
    6: ("FLOAT16", np.dtype(np.float16)),
    7: ("FLOAT32", np.dtype(np.float32)),
    8: ("FLOAT64", np.dtype(np.float64)),
}
OPS = {0: "SUM", 1: "PROD", 2: "MAX", 3: "MIN", 4: "AVG"}
UFUNCS = {0: np.add, 1: np.multiply, 2: np.maximum, 3: np.minimum, 4: np.add}
STATUS = {
    1: "NCCL_ERROR_UNHANDLED_CUDA_ERROR",
    4: "NCCL_ERROR_INVALID_ARGUMENT",
    5: "NCCL_ERROR_INVALID_USAGE",
    6: "NCCL_ERROR_REMOTE_ERROR",
}
UNHANDLED_CUDA_ERROR, INVALID_ARGUMENT, INVALID_USAGE, REMOTE_ERROR = 1, 4, 5, 6


class NcclError(RuntimeError):
    """CuPy's ``NcclError``: ``status`` is NCCL's result code."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(f"{STATUS[status]}: fake NCCL: {detail}")


class DisciplineError(AssertionError):
    """A rule the double checks beyond what NCCL itself returns an error for (on a GPU: a hang,
    a race or wrong numbers)."""


@dataclass(frozen=True)
class Call:
    """One NCCL call as every rank must make it."""

    kind: str
    count: int
    datatype: int
    op: int | None
    root: int | None

    def __str__(self) -> str:
        parts = [f"count={self.count}", f"NCCL_{TYPES[self.datatype][0]}"]
        if self.op is not None:
            parts.append(f"NCCL_{OPS[self.op]}")
        if self.root is not None:
            parts.append(f"root={self.root}")
        return f"{self.kind}({', '.join(parts)})"


def bytes_at(ptr: int, nbytes: int) -> np.ndarray:
    """A uint8 view of ``nbytes`` of (fake device) memory at ``ptr``."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(ptr))


class Prepared:
    """A checked call: what this rank sends, and how it writes what every rank sent."""

    def __init__(
        self,
        call: Call,
        stream: fake_streams.Stream,
        send: tuple[int, int] | None,
        finish: Callable[[list[Any]], tuple[int, np.ndarray] | None],
        owners: Sequence[np.ndarray],
    ) -> None:
        self.call = call
        self.stream = stream
        self.send = send  # (pointer, bytes) read when the call runs, or None
        self.finish = finish  # every rank's payload -> (pointer, bytes to write) or None
        self.owners = owners  # the allocations, kept alive until the write has landed

    def what(self) -> str:
        return str(self.call)

    def payload(self) -> np.ndarray | None:
        """This rank's send bytes, read in stream order (after the stream's queued work)."""
        if self.send is None:
            return None
        fake_streams.flush(self.stream)
        return bytes_at(*self.send).copy()

    def land(self, payloads: list[Any]) -> None:
        """Queues the result's write on the stream: it lands when the stream is waited for."""
        result = self.finish(payloads)
        if result is None:
            return
        ptr, data = result
        owners = self.owners

        def write() -> None:
            _ = owners  # the memory written is alive: this closure holds its owners
            bytes_at(ptr, data.nbytes)[...] = data

        fake_streams.enqueue(self.stream, write)


def reduce_payloads(payloads: list[Any], dtype: np.dtype, op: int) -> np.ndarray:
    arrays = [np.frombuffer(p, dtype=dtype) for p in payloads]
    out = arrays[0].copy()
    with np.errstate(all="ignore"):  # integer wrap-around and float overflow, as on a GPU
        for a in arrays[1:]:
            UFUNCS[op](out, a, out=out)
        if op == NCCL_AVG:
            out = (out / len(arrays)).astype(dtype)
    return out.view(np.uint8)


class Failed(NamedTuple):
    """A call that failed its checks on this rank."""

    kind: str
    error: Exception

    def what(self) -> str:
        return f"{self.kind}(failed)"
