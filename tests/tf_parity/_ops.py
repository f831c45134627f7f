"""The few tensor ops the ported scenarios compute inside replica functions, for either
backend: ``tf.math`` under TF, numpy under mwms_mpi (whose tensors are numpy arrays).

Kept here rather than on ``tests/support/differential.Backend`` so the ported files do not
grow a shared class: each helper takes the backend and converts its inputs the way TF's op
would (``tf.constant`` rules: Python floats are float32), so both sides compute on the same
dtypes and the pins compare like with like.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.differential import Backend


def _tf(b: Backend) -> Any:
    """TF's module when ``b`` is TF's backend, else None."""
    return getattr(b, "tf", None)


def _arr(b: Backend, x: Any) -> Any:
    from mwms_mpi.values.convert import as_array

    return as_array(x)


def square(b: Backend, x: Any) -> Any:
    """``tf.math.square``."""
    tf = _tf(b)
    return tf.math.square(x) if tf is not None else np.square(_arr(b, x))


def reduce_mean(b: Backend, x: Any) -> Any:
    """``tf.reduce_mean`` over every axis (NaN for an empty tensor, as TF gives)."""
    tf = _tf(b)
    if tf is not None:
        return tf.reduce_mean(x)
    a = _arr(b, x)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.mean(a) if a.size else np.float32("nan"), dtype=a.dtype)


def reduce_sum(b: Backend, x: Any) -> Any:
    """``tf.reduce_sum`` over every axis, keeping the dtype."""
    tf = _tf(b)
    if tf is not None:
        return tf.reduce_sum(x)
    a = _arr(b, x)
    return np.asarray(np.sum(a), dtype=a.dtype)


def size(b: Backend, x: Any) -> Any:
    """``tf.size`` (int32)."""
    tf = _tf(b)
    return tf.size(x) if tf is not None else np.asarray(_arr(b, x).size, dtype=np.int32)


def zeros(b: Backend, shape: list[int]) -> Any:
    """``tf.zeros`` (float32)."""
    tf = _tf(b)
    return tf.zeros(shape) if tf is not None else np.zeros(shape, dtype=np.float32)


def add(b: Backend, x: Any, y: Any) -> Any:
    """``x + y`` under TF's conversion rules (a variable is read)."""
    tf = _tf(b)
    return tf.math.add(x, y) if tf is not None else np.add(_arr(b, x), _arr(b, y))


def multiply(b: Backend, x: Any, y: Any) -> Any:
    """``x * y`` under TF's conversion rules."""
    tf = _tf(b)
    return tf.math.multiply(x, y) if tf is not None else np.multiply(_arr(b, x), _arr(b, y))


def identity(b: Backend, x: Any) -> Any:
    """``tf.identity`` (a variable is read)."""
    tf = _tf(b)
    return tf.identity(x) if tf is not None else np.array(_arr(b, x))


def local(b: Backend, s: Any, x: Any) -> list[Any]:
    """``list(s.experimental_local_results(x))``: the tuple's components, backend-neutral."""
    return list(s.experimental_local_results(x))


def indexed_slices(b: Backend, values: Any, indices: Any, dense_shape: Any) -> Any:
    """``tf.IndexedSlices`` of constants (TF's ``IndexedSlicesValue`` made a tensor)."""
    tf = _tf(b)
    if tf is not None:
        return tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant(dense_shape))
    from mwms_mpi import IndexedSlices

    return IndexedSlices(_arr(b, values), _arr(b, indices), _arr(b, dense_shape))


def per_replica(b: Backend, s: Any, value_fn: Any) -> Any:
    """A per-replica value whose component on global replica ``i`` is ``value_fn(i)`` (the
    public way to build what TF's tests build with ``values.PerReplica``)."""
    return s.experimental_distribute_values_from_function(
        lambda ctx: value_fn(int(ctx.replica_id_in_sync_group))
    )


def communication_options(b: Backend, implementation: str) -> Any:
    """``CommunicationOptions(implementation=CommunicationImplementation.<implementation>)``."""
    experimental = b.ds.experimental
    kind = getattr(experimental.CommunicationImplementation, implementation)
    return experimental.CommunicationOptions(implementation=kind)


def float_square(b: Backend, x: Any) -> Any:
    """``tf.cast(x, tf.float32) ** 2`` (a dataset map function's body)."""
    tf = _tf(b)
    if tf is not None:
        return tf.cast(x, tf.float32) ** 2
    return np.asarray(x, dtype=np.float32) ** 2


def shape(x: Any) -> list[int]:
    """A tensor's (eager, known) shape as a list of ints."""
    return [int(d) for d in x.shape]


def arange(b: Backend, start: Any, limit: Any) -> Any:
    """``tf.range(start, limit)`` (the dtype of ``start``)."""
    tf = _tf(b)
    if tf is not None:
        return tf.range(start, limit)
    first = _arr(b, start)
    return np.arange(first, _arr(b, limit), dtype=first.dtype)


def cast(b: Backend, x: Any, dtype: str) -> Any:
    """``tf.cast(x, dtype)``."""
    tf = _tf(b)
    return tf.cast(x, dtype) if tf is not None else np.asarray(_arr(b, x), dtype=dtype)


def segment_sum_to_zero(b: Backend, x: Any) -> Any:
    """``tf.math.unsorted_segment_sum(x, zeros_like(x), tf.shape(x)[0])``: every element into
    segment 0, as many segments as ``x`` has rows."""
    tf = _tf(b)
    if tf is not None:
        return tf.math.unsorted_segment_sum(x, tf.zeros_like(x), tf.shape(x)[0])
    a = _arr(b, x)
    out = np.zeros_like(a)  # as many segments as rows
    np.add.at(out, np.zeros(a.shape[0], dtype=np.intp), a)
    return out


def reshapes(b: Backend, x: Any) -> list[Any]:
    """testReshapeWithDynamicInputs' step: ``x`` of shape [n, 1, 2] tiled to [n, n, 2], then
    reshaped to [-1, 2], [n, n, 2], [n, -1, 2], [-1, n, 2] and [-1, 2] again."""
    tf = _tf(b)
    if tf is not None:
        n = tf.shape(x)[0]
        tile = tf.tile(x, [1, n, 1])
        r1 = tf.reshape(tile, [-1, 2])
        shapes = ([n, n, 2], [n, -1, 2], [-1, n, 2])
        return [r1, *(tf.reshape(r1, s) for s in shapes), r1]
    a = _arr(b, x)
    n = a.shape[0]
    r1 = np.tile(a, [1, n, 1]).reshape([-1, 2])
    return [r1, r1.reshape([n, n, 2]), r1.reshape([n, -1, 2]), r1.reshape([-1, n, 2]), r1]
