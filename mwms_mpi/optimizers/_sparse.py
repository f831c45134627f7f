"""Keras's arithmetic on ``IndexedSlices`` gradients (TF backend), for bitwise-equal updates.

Keras 3 does not densify a sparse gradient first: its ``ops`` keep slices sparse where the
operation allows it (``keras/src/backend/tensorflow/sparse.py``), and ``assign_sub`` of slices
is TF's ``scatter_sub``. With repeated rows (one embedding row looked up twice, or two replicas'
slices concatenated by the all-reduce) that differs from densifying first: Adagrad adds
``a**2 + b**2`` to its accumulator, not ``(a + b)**2``. These helpers repeat Keras's steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import errors
from mwms_mpi._arrays import array_module, as_dtype
from mwms_mpi.values import IndexedSlices


def slices_of(grad: Any, dtype: Any) -> tuple[Any, Any] | None:
    """``(indices, values)`` of a sparse ``grad`` (values cast to ``dtype``), else ``None``."""
    if not isinstance(grad, IndexedSlices):
        return None
    values = as_dtype(grad.values, dtype)
    xp = array_module(values)
    return xp.asarray(grad.indices).reshape(-1), values


def densify(indices: Any, values: Any, shape: tuple[int, ...]) -> Any:
    """The dense array of the slices (``tf.convert_to_tensor``: repeated rows add up, in order)."""
    xp = array_module(values)
    dense = xp.zeros(shape, dtype=values.dtype)
    xp.add.at(dense, indices, values)
    return dense


def scatter_added(current: Any, indices: Any, values: Any) -> Any:
    """What ``var.scatter_add`` leaves in a variable holding ``current``: each slice added to
    its row in turn, repeated rows included (a fresh array; ``current`` is left as it is).

    ``scatter_sub`` is this with the values negated: ``x - y`` is ``x + (-y)`` bit for bit in
    IEEE arithmetic, so TF's sequential subtraction is reproduced exactly.
    """
    xp = array_module(values)
    new = xp.array(current, copy=True)
    xp.add.at(new, indices, values)
    return new


def divide_by_dense(indices: Any, values: Any, divisor: Any) -> tuple[Any, Any]:
    """Keras's ``ops.divide(slices, dense)``: ``(indices, values)`` of the quotient slices.

    Where no row of ``divisor`` holds a zero or a NaN, the slices' rows are divided by the
    divisor's rows. Otherwise Keras adds those rows (as zero slices, so the quotient there is
    ``0 / 0`` = NaN, or ``0 / x``) and sorts the union of the rows; it regathers the values with
    a position table built by ``scatter_nd``, which adds repeated rows' positions (a quirk kept
    here, so the result is Keras's). A position past the end fails as TF's ``gather`` does.

    Raises:
      InvalidArgumentError: where Keras's regather reads past the slices (TF's message).
    """
    xp = array_module(values, divisor)
    bad = (divisor == 0) | xp.isnan(divisor)
    if not bool(bad.any()):
        return indices, values / divisor[indices]
    dim0 = divisor.shape[0]
    bad_rows = bad.reshape(dim0, -1).any(axis=1)
    present = xp.zeros(dim0, dtype=bool)
    present[indices] = True
    union = xp.flatnonzero(present | bad_rows)
    count = int(indices.shape[0])
    if count == int(union.shape[0]):
        regathered = values  # Keras keeps the values as they are, paired with sorted rows
    else:
        position = xp.zeros(dim0, dtype=np.int64)
        xp.add.at(position, indices, xp.arange(1, count + 1, dtype=np.int64))
        wanted = position[union]
        if bool((wanted > count).any()):
            i = int(xp.flatnonzero(wanted > count)[0])
            raise errors.InvalidArgumentError(
                None,
                None,
                f"indices[{i}] = {int(wanted[i])} is not in [0, {count + 1}) [Op:GatherV2] "
                "(Keras's divide of IndexedSlices with repeated rows by a dense divisor that "
                "holds a zero or a NaN)",
            )
        padded = xp.concatenate([xp.zeros_like(values[0:1]), values])
        regathered = padded[wanted]
    return union, regathered / divisor[union]
