"""``Strategy.reduce(..., axis=...)``'s local step: TF's ``reduce_sum`` of one replica's value
along ``axis``, before the values are reduced across replicas."""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi._graph_constant import graph_array
from mwms_mpi._tf_sum import reduce_sum_all
from mwms_mpi.values import IndexedSlices
from mwms_mpi.values.convert import as_array, read_variables
from mwms_mpi.values.indexed_slices import to_dense


def reduce_axes(v: Any, axis: Any) -> tuple[int, ...]:
    """``axis`` (an int or a sequence of them) checked against ``v``'s rank, as TF checks it.

    Raises:
      ValueError: for an axis out of range (a scalar has none), in TF's words.
    """
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    for a in axes:
        if not -v.ndim <= a < v.ndim:
            raise ValueError(f"Invalid reduction dimension {a} for input with {v.ndim} dimensions.")
    return tuple(int(a) % v.ndim for a in axes)


def reduce_sum(v: Any, axis: Any) -> Any:
    """``reduce_sum`` keeping the input's dtype, as TF does (numpy widens small ints).

    Raises:
      TypeError: for bools and strings (TF's ``reduce_sum`` has no kernel for them), before
        the axis is checked (TF checks the dtype when it builds the op).
    """
    if v.dtype.kind in "bSU":
        name = "bool" if v.dtype.kind == "b" else "string"
        raise TypeError(
            f"Value passed to parameter 'input' has DataType {name} not in list of allowed "
            "values: float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, "
            "qint32, bfloat16, qint16, quint16, uint16, complex128, float16, uint32, uint64"
        )
    axes = reduce_axes(v, axis)
    if len(set(axes)) == v.ndim:  # every axis: TF's addition order, so TF's last bits
        return _arrays.as_result(reduce_sum_all(v))
    xp = _arrays.array_module(v)  # a CuPy value is summed on its GPU
    return _arrays.as_result(xp.sum(v, axis=axes, dtype=v.dtype))


def local_value(value: Any) -> Any:
    """One replica's value as ``reduce_sum`` takes it: converted as TF converts it, and an
    ``IndexedSlices`` as its dense tensor (TF's ``reduce_sum`` densifies it, so a MEAN counts
    every dense row)."""
    value = as_array(value)
    return to_dense(value) if isinstance(value, IndexedSlices) else value


def function_value(value: Any) -> Any:
    """One replica's value as TF's SUM step takes it: that step runs in a ``tf.function``
    (TF traces one per axis), where a Python list or number is a graph constant and a list
    holding tensors is packed without the eager fast path (``_graph_constant.py``):
    ``[True, 0]`` is int32 and ``[1e300]`` float32 inf there, where eager TF refuses both.
    The caller passes the argument through ``function_arguments`` first (numpy scalars in it
    are tensors)."""
    if isinstance(value, list | tuple | int | float | complex):
        value = graph_array(read_variables(value))
    return local_value(value)
