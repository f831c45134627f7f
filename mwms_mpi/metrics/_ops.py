"""The few ``keras.ops`` a metric computes with, in numpy, with Keras 3's TF-backend dtype rules.

Keras 3.15.1 (the Keras TF 2.21 installs) is the spec: conversion casts where Keras's
``convert_to_tensor`` casts, ``mean`` of integers is float32 and of float16 is computed in
float32, ``argmax`` breaks ties by the first index, puts -0.0 below 0.0 and never picks NaN,
``divide_no_nan`` gives 0 for a zero divisor, and a product of two dtypes is TF's error. Float
sums add in TF's CPU order (``mwms_mpi._tf_sum``), so results agree to the last bit; an empty
mean is TF's positive NaN. Device (CuPy) inputs are brought to the host: a metric's state is a
few scalars, so its arithmetic stays on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._tf_sum import reduce_sum_last
from mwms_mpi._tf_text import tf_cpu_node, tf_dtype_name, tf_shape_string
from mwms_mpi.values.convert import as_array, convert_to_dtype, is_tensor

FLOAT32 = np.dtype(np.float32)
# TF's Sub kernel's types, as its error for bool lists them
_SUB_TYPES = (
    "bfloat16, half, float, double, uint8, int8, uint16, int16, int32, int64, complex64, "
    "complex128, uint32, uint64"
)


def convert(x: Any, dtype: Any = None) -> np.ndarray:
    """Keras's ``convert_to_tensor(x, dtype)`` (TF backend) as a host array.

    Arrays are tensors here, so they are cast (``tf.cast``); a Python value goes to an integer
    or bool dtype by converting first and casting after (floats truncate, as Keras does), and to
    a float dtype by ``tf.convert_to_tensor(x, dtype)``.
    """
    if dtype is None:
        return np.asarray(_arrays.to_host(as_array(x)))
    dtype = np.dtype(dtype)
    if is_tensor(x) or dtype.kind in "biu":
        array = np.asarray(_arrays.to_host(as_array(x)))
        return array if array.dtype == dtype else array.astype(dtype)
    return np.asarray(convert_to_dtype(x, dtype))


def cast(x: Any, dtype: Any) -> np.ndarray:
    """``ops.cast``: converted without a dtype first (so Python bools and floats are accepted
    for any dtype), then cast."""
    array = convert(x)
    dtype = np.dtype(dtype)
    return array if array.dtype == dtype else array.astype(dtype)


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """Keras's ``result_type(dtype, "float32")``: integers and bool (and float16) in float32."""
    return np.dtype(np.float64) if dtype == np.float64 else FLOAT32


def result_type(a: Any, b: Any) -> np.dtype[Any]:
    """Keras's ``result_type`` of two dtypes, for the ones a metric meets: a float with an
    integer or bool is the float (Keras's lattice puts every integer below float16), two
    floats or two integers promote as numpy does."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    if (a.kind == "f") != (b.kind == "f"):
        return a if a.kind == "f" else b
    return np.promote_types(a, b)


def _reduction_axes(x: np.ndarray, axis: Any, op: str) -> tuple[int, ...]:
    """``axis`` (None: all) as sorted non-negative axes of ``x``.

    Raises:
      InvalidArgumentError: an axis ``x`` lacks (TF's kernel message for ``op``).
    """
    if axis is None:
        return tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise errors.InvalidArgumentError(
                None,
                op,
                tf_cpu_node(op) + f"Invalid reduction dimension ({a} for input with {x.ndim} "
                f"dimension(s) [Op:{op}] name: ",
            )
    return tuple(sorted({int(a) % x.ndim for a in axes}))


def _sum_in_dtype(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``tf.reduce_sum(x, axes)`` in ``x``'s dtype: floats over trailing axes (every metric
    reduction) in TF's order, anything else by numpy (exact for integers)."""
    if not axes:
        return x.copy()
    kept = x.shape[: x.ndim - len(axes)]
    if x.dtype.kind == "f" and axes == tuple(range(len(kept), x.ndim)):
        rows = x.reshape(*kept, -1) if x.size else np.zeros((*kept, 0), x.dtype)
        return reduce_sum_last(rows)
    return np.asarray(np.sum(x, axis=axes, dtype=x.dtype))


def mean(x: np.ndarray, axis: Any = None) -> np.ndarray:
    """``ops.mean``: computed in :func:`compute_dtype`; integers and bool give float32, floats
    keep their dtype (float16 is averaged in float32 and cast back, as Keras does). The sum is
    TF's (its order) divided by the count; an empty mean is NaN, positive as TF's kernel fills
    it (numpy's 0/0 sets the sign bit).

    Raises:
      InvalidArgumentError: an axis ``x`` lacks (TF's message).
    """
    axes = _reduction_axes(x, axis, "Mean")
    wide = compute_dtype(x.dtype)
    out_dtype = wide if x.dtype.kind in "biu" else x.dtype
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = _sum_in_dtype(x.astype(wide), axes)
    if count == 0:
        return np.full(total.shape, np.nan, out_dtype)
    return np.asarray(total / wide.type(count)).astype(wide).astype(out_dtype)


def sum_(x: np.ndarray, axis: Any = None) -> np.ndarray:
    """``ops.sum``: bool and 8/16-bit integers sum in (u)int32, everything else in its dtype
    (floats in TF's order).

    Raises:
      InvalidArgumentError: an axis ``x`` lacks (TF's message).
    """
    dtype = x.dtype
    if dtype.kind == "b" or dtype in (np.int8, np.int16):
        dtype = np.dtype(np.int32)
    elif dtype in (np.uint8, np.uint16):
        dtype = np.dtype(np.uint32)
    return _sum_in_dtype(x.astype(dtype), _reduction_axes(x, axis, "Sum"))


def multiply(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x * y`` of two tensors: TF's ``Mul`` takes one dtype.

    Raises:
      InvalidArgumentError: ``y``'s dtype is not ``x``'s (TF's kernel message).
    """
    if x.dtype != y.dtype:
        raise errors.InvalidArgumentError(
            None,
            "Mul",
            f"cannot compute Mul as input #1(zero-based) was expected to be a "
            f"{tf_dtype_name(x.dtype)} tensor but is a {tf_dtype_name(y.dtype)} tensor "
            "[Op:Mul] name: ",
        )
    return np.asarray(x * y)


def subtract(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``ops.subtract`` of two arrays of one dtype, with broadcasting.

    Raises:
      InvalidArgumentError: for bool (TF's ``Sub`` kernel has no bool) or shapes that do not
        broadcast.
    """
    if x.dtype.kind == "b":
        raise errors.InvalidArgumentError(
            None,
            "Sub",
            f"Value for attr 'T' of bool is not in the list of allowed values: {_SUB_TYPES}\n\t; "
            "NodeDef: {{node Sub}}; Op<name=Sub; signature=x:T, y:T -> z:T; attr=T:type,allowed="
            f"[{', '.join('DT_' + t.upper() for t in _SUB_TYPES.split(', '))}]> [Op:Sub] name: ",
        )
    return elementwise(np.subtract, "Sub", x, y)


def argmax(x: Any, axis: int = -1) -> np.ndarray:
    """``ops.argmax`` (int32): the first index of the largest value; for floats, -0.0 counts as
    below 0.0 (Keras's flush-to-zero fix), and float16 is compared in float32. TF's kernel
    starts from index 0 holding the dtype's lowest value and takes only a strictly larger
    one: NaN is never picked, nor the lowest value or -inf after index 0.

    Raises:
      InvalidArgumentError: ``axis`` is empty (TF's kernel message).
    """
    x = convert(x)
    if x.ndim > 0 and x.shape[axis] == 0:
        raise errors.InvalidArgumentError(
            None,
            "ArgMax",
            tf_cpu_node("ArgMax")
            + f"Reduction axis {axis} is empty in shape {tf_shape_string(x.shape)} [Op:ArgMax]",
        )
    if x.dtype.kind == "f" and x.ndim > 0:
        x = x.astype(compute_dtype(x.dtype))
        x = np.where((x == 0) & np.signbit(x), -np.finfo(x.dtype).tiny, x)
        x = np.where(np.isnan(x) | (x <= np.finfo(x.dtype).min), -np.inf, x)
    return np.asarray(np.argmax(x, axis=axis)).astype(np.int32)


def squeeze(x: np.ndarray, axis: int) -> np.ndarray:
    """``ops.squeeze(x, axis)``.

    Raises:
      ValueError: the axis is not 1 (Keras's own check and message).
    """
    if x.shape[axis] != 1:
        raise ValueError(f"Cannot squeeze axis={axis}, because the dimension is not 1.")
    return np.squeeze(x, axis)


def squeeze_or_expand_to_same_rank(x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, ...]:
    """Keras's ``squeeze_or_expand_to_same_rank``: ranks that differ by one with a trailing 1
    are matched (a rank-1 partner is expanded, any other squeezed)."""
    r1, r2 = x1.ndim, x2.ndim
    if r1 == r2:
        return x1, x2
    if r1 == r2 + 1 and x1.shape[-1] == 1:
        if r2 == 1:
            x2 = np.expand_dims(x2, -1)
        else:
            x1 = np.squeeze(x1, -1)
    if r2 == r1 + 1 and x2.shape[-1] == 1:
        if r1 == 1:
            x1 = np.expand_dims(x1, -1)
        else:
            x2 = np.squeeze(x2, -1)
    return x1, x2


def elementwise(op: Callable[..., Any], name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``op(x, y)`` with broadcasting; shapes that do not broadcast raise TF's error for the
    kernel ``name`` (``Equal``, ``Sub``).

    Raises:
      InvalidArgumentError: the shapes are incompatible (TF's kernel message).
    """
    try:
        return np.asarray(op(x, y))
    except ValueError:
        raise errors.InvalidArgumentError(
            None,
            name,
            tf_cpu_node(name)
            + f"Incompatible shapes: {tf_shape_string(x.shape)} vs. "
            + f"{tf_shape_string(y.shape)} [Op:{name}] name: ",
        ) from None


def broadcast_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``ops.broadcast_to``, with TF's ``BroadcastTo`` checks: the rank, then the shapes'
    broadcast, which must be ``shape`` itself.

    Raises:
      InvalidArgumentError: ``x`` cannot take ``shape`` (TF's kernel messages).
    """
    if x.ndim > len(shape):
        problem = (
            f"Rank of input ({x.ndim}) must be no greater than rank of output shape ({len(shape)})."
        )
    else:
        try:
            joint = np.broadcast_shapes(x.shape, shape)
        except ValueError:
            problem = (
                f"Incompatible shapes: {tf_shape_string(x.shape)} vs. {tf_shape_string(shape)}"
            )
        else:
            if joint == tuple(shape):
                return np.broadcast_to(x, shape)
            problem = (
                f"Unable to broadcast tensor of shape {tf_shape_string(x.shape)} to tensor of "
                f"shape {tf_shape_string(shape)}"
            )
    raise errors.InvalidArgumentError(
        None, "BroadcastTo", tf_cpu_node("BroadcastTo") + f"{problem} [Op:BroadcastTo]"
    )


def divide_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``ops.divide_no_nan`` of two 0-d values of one float dtype: 0 where ``y`` is 0."""
    if y == 0:
        return np.zeros((), x.dtype)
    return np.asarray(x / y).astype(x.dtype)
