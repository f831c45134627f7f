"""The checks of a call's arrays that the plan step (``plans.py``) makes on every call.

Each raises an error the call template refuses on every rank (``arguments.py``): a rank whose
arrays are wrong raises with its peers, which would otherwise wait for it in the collective.
They run on every call, cache hit or not, because what they check (an array's memory, its
device, the current device, a divisor) is not part of a plan's cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mwms_mpi import _arrays, errors
from mwms_mpi._arrays import native_dtype
from mwms_mpi.collective.arguments import refusable
from mwms_mpi.collective.ops import Op


def check_one_kind(op_name: str, rank: int, arrays: Sequence[Any]) -> None:
    """Raises if host and device arrays are mixed in one call on this rank.

    Raises:
      InvalidArgumentError: naming the first array of each kind.
    """
    if not arrays or _arrays.cupy_if_imported() is None:  # no CuPy: every array is numpy
        return
    first = _arrays.kind(arrays[0])
    for i, a in enumerate(arrays):
        other = _arrays.kind(a)
        if other != first:
            raise errors.InvalidArgumentError(
                None,
                op_name,
                f"{op_name} on rank {rank}: host and device arrays mixed in one call (array 0 "
                f"is {first}, array {i} is {other}); pass all on the host or all on the GPU",
                rank=rank,
            )


def check_device(op_name: str, rank: int, device: int, arrays: Sequence[Any]) -> None:
    """Raises unless every array is on ``device`` and it is the current device: a backend bound
    to one GPU (NCCL: its communicator's) queues on the current device's stream, and another
    device's array or stream is CUDA's invalid-resource-handle error, on this rank only.

    Raises:
      ValueError: naming the array's device and the backend's (refusable: every rank raises).
    """
    cp = _arrays.cupy_if_imported()
    current = device if cp is None else int(cp.cuda.runtime.getDevice())
    for i, a in enumerate(arrays):
        on = int(a.device.id)
        if on != device:
            where = f"array {i} is on GPU {on}" if len(arrays) > 1 else f"the array is on GPU {on}"
            raise refusable(
                ValueError(
                    f"{op_name} on rank {rank}: {where}, but this rank's NCCL communicator is on "
                    f"GPU {device}; pass arrays on GPU {device} (the communicator's device: "
                    "Communicator(device=...), or the strategy's placement)"
                )
            )
    if current != device:
        raise refusable(
            ValueError(
                f"{op_name} on rank {rank}: the current device is GPU {current}, but this rank's "
                f"NCCL communicator and its arrays are on GPU {device}; NCCL queues on the "
                f"current device's stream: call it under `with cupy.cuda.Device({device}):`"
            )
        )


def check_out(out: Any, array: Any, backend: Any, rank: int) -> None:
    """Raises unless ``out`` can take the all-reduce of ``array`` (``Communicator.all_reduce``'s
    ``out``): an array of ``array``'s kind, shape and native dtype, writable and C-contiguous,
    that is ``array`` itself or shares no memory with it (MPI refuses aliased buffers, and a
    partly overlapping input would be overwritten while it is read).

    Raises:
      ValueError: naming what is wrong with ``out`` on this rank (refusable).
    """
    problem = None
    if out is array:
        if not backend.is_sendable(out) or not out.flags.writeable:
            problem = (
                "out=array reduces in place, which needs a writable C-contiguous array of "
                "native byte order"
            )
    elif type(out) is not type(array) or not backend.supports(out):
        problem = (
            f"out must be an array of the input's kind ({type(array).__name__}), got "
            f"{type(out).__name__}"
        )
    elif out.shape != array.shape or out.dtype != native_dtype(array.dtype):
        problem = (
            f"out is {out.dtype}{list(out.shape)}, the result is "
            f"{native_dtype(array.dtype)}{list(array.shape)}"
        )
    elif not out.flags.c_contiguous or not out.flags.writeable:
        problem = "out must be writable and C-contiguous"
    elif backend.xp.shares_memory(out, array):
        problem = (
            "out shares memory with the input; pass out=array to reduce in place, or a "
            "separate buffer"
        )
    if problem is not None:
        raise refusable(ValueError(f"all_reduce on rank {rank}: {problem}"))


def check_divisor(op_name: str, divisor: int, op: Op, dtypes: Sequence[Any]) -> None:
    """The one rule of a MEAN's ``divisor`` inside the collective layer: it divides float
    (and complex) SUMs only, each exact sum before its one rounding.

    Raises:
      ValueError: for a ``divisor`` other than 1 on anything else (refusable).
    """
    if divisor != 1 and (op is not Op.SUM or any(d.kind not in "fc" for d in dtypes)):
        kinds = ", ".join(sorted({str(d) for d in dtypes}))
        raise refusable(
            ValueError(
                f"{op_name}: divisor={divisor!r} divides float SUMs only, not a {op.value} of "
                f"{kinds}"
            )
        )
