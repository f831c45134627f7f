"""Which arrays and dtypes MPI can take as they are, and how others are made to fit.

MPI's MAX/MIN reject C bool, so bool travels as uint8; complex numbers have no order, so MAX/MIN
on them is refused; non-native byte order and non-contiguous arrays are copied once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import errors
from mwms_mpi._arrays import native_dtype
from mwms_mpi.collective.arguments import refusable
from mwms_mpi.collective.backends import CollectiveBackend
from mwms_mpi.collective.ops import Op


def wire_dtype(dtype: Any, op: Op, op_name: str, rank: int) -> Any:
    """The dtype sent to MPI: bool travels as uint8 (MPI rejects MAX/MIN on C bool)."""
    kind = dtype.kind
    if kind == "b":
        if op is Op.SUM:
            raise errors.InvalidArgumentError(
                None,
                op_name,
                f"{op_name} on rank {rank}: bool arrays can be reduced "
                "with MAX or MIN only, not SUM",
                rank=rank,
            )
        return np.dtype(np.uint8)
    if kind == "c" and op is not Op.SUM:
        raise errors.InvalidArgumentError(
            None,
            op_name,
            f"{op_name} on rank {rank}: complex {dtype.name} arrays "
            f"have no order, so they cannot be reduced with {op.value}",
            rank=rank,
        )
    if kind not in "biufc":
        raise errors.InvalidArgumentError(
            None,
            op_name,
            f"{op_name} on rank {rank}: dtype {dtype.name} cannot be reduced",
            rank=rank,
        )
    return native_dtype(dtype)


def gatherable(dtype: Any, op_name: str) -> None:
    """Checks MPI can move ``dtype``'s elements as they are (gathers and broadcasts).

    Raises:
      InvalidArgumentError: for strings, objects, records and dates, which MPI has no type for
        (TF's collectives take numbers and booleans only).
    """
    if dtype.kind not in "biufc":
        raise errors.InvalidArgumentError(
            None,
            op_name,
            f"{op_name}: arrays of dtype {dtype} cannot be sent; collectives move booleans "
            "and numbers only",
        )


def contiguous(backend: CollectiveBackend, array: Any) -> Any:
    """``array`` itself if the library can read it, else a contiguous native-order copy."""
    if backend.is_sendable(array):
        return array
    return backend.xp.ascontiguousarray(array, dtype=native_dtype(array.dtype))


def normalize_axis(array: Any, axis: int, op_name: str) -> int:
    """``axis`` as a non-negative dimension of ``array``.

    Raises:
      TypeError: for an axis that is not an integer (refusable: ``arguments.py``).
      ValueError: for a 0-d array or an axis out of range (refusable).
    """
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise refusable(TypeError(f"{op_name}: axis must be an integer, got {axis!r}"))
    if array.ndim == 0:
        raise refusable(
            ValueError(f"{op_name}: cannot gather a 0-d array (shape ()); give it an axis")
        )
    if not -array.ndim <= axis < array.ndim:
        raise refusable(
            ValueError(
                f"{op_name}: axis {axis} is out of range for an array of shape {array.shape}"
            )
        )
    return int(axis) % array.ndim
