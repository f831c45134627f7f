"""Keras's gradient transforms before the all-reduce: ``loss_scale_factor``, ``clipnorm``,
``global_clipnorm`` and ``clipvalue``, applied to one replica's own gradients.

Keras 3 under ``tf.distribute`` (``BaseOptimizer.apply``, ``_backend_apply_gradients``) divides
by the loss scale and clips in replica context, before ``_all_reduce_sum_gradients``: each
replica clips its own gradient, and the sum of the clipped gradients is applied. So a step
with ``clipnorm=1`` can move a variable by up to ``num_replicas_in_sync`` times 1, as in Keras.

Each transform repeats TF's operations in their order and dtypes, so that the bits are
Keras's: Python floats become the gradient's dtype where TF converts them (``values *
clip_norm``), norms are ``reduce_sum`` in TF's addition order (``mwms_mpi._tf_sum``), and
``IndexedSlices`` are treated as TF treats them (``clip_by_norm`` and ``clip_by_value`` keep
them sparse; ``clip_by_global_norm`` makes them dense; dividing them by the loss scale is
TF's ``TypeError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi import errors
from mwms_mpi._arrays import array_module
from mwms_mpi._tf_sum import reduce_sum_all
from mwms_mpi._tf_text import tf_dtype_name
from mwms_mpi.optimizers import _sparse
from mwms_mpi.values import DistributedValues, IndexedSlices, PerReplica
from mwms_mpi.values.convert import as_array
from mwms_mpi.values.indexed_slices import to_dense


def transformed_pairs(
    strategy: Any,
    in_replica_context: bool,
    pairs: Sequence[tuple[Any, Any]],
    loss_scale_factor: Any,
    clipnorm: Any,
    global_clipnorm: Any,
    clipvalue: Any,
) -> list[tuple[Any, Any]]:
    """``(gradient, variable)`` pairs with each replica's gradients transformed.

    In replica context the gradients are this replica's. In cross-replica context a
    distributed gradient is transformed per replica of ``strategy``, with the other gradients'
    values on that replica (a plain value is the same on each), and regrouped.
    """
    grads = [g for g, _ in pairs]

    def apply(replica_grads: Sequence[Any]) -> list[Any]:
        arrays = [None if g is None else as_array(g) for g in replica_grads]
        return transform(arrays, loss_scale_factor, clipnorm, global_clipnorm, clipvalue)

    if in_replica_context or not any(isinstance(g, DistributedValues) for g in grads):
        new = apply(grads)
    else:
        local = strategy.experimental_local_results
        columns = [local(g) if isinstance(g, DistributedValues) else None for g in grads]
        count = max(len(c) for c in columns if c is not None)
        rows = [
            apply([g if c is None else c[i] for g, c in zip(grads, columns, strict=True)])
            for i in range(count)
        ]
        new = [
            g if c is None else PerReplica(tuple(row[k] for row in rows))
            for k, (g, c) in enumerate(zip(grads, columns, strict=True))
        ]
    return [(g, v) for g, (_, v) in zip(new, pairs, strict=True)]


def transform(
    grads: Sequence[Any],
    loss_scale_factor: Any,
    clipnorm: Any,
    global_clipnorm: Any,
    clipvalue: Any,
) -> list[Any]:
    """One replica's gradients (arrays, ``IndexedSlices`` or ``None``) unscaled, then clipped
    by the one clipping argument Keras acts on (its ``_clip_gradients`` tests them in this
    order, each only when it is truthy and positive)."""
    out = list(grads)
    if loss_scale_factor is not None:
        out = [g if g is None else g / loss_scale_factor for g in out]
    if clipnorm and clipnorm > 0:
        return [g if g is None else _clip_by_norm(g, clipnorm) for g in out]
    if global_clipnorm and global_clipnorm > 0:
        return _clip_by_global_norm(out, global_clipnorm)
    if clipvalue and clipvalue > 0:
        return [g if g is None else _clip_by_value(g, clipvalue) for g in out]
    return out


def _clip_by_norm(grad: Any, clip_norm: Any) -> Any:
    """``tf.clip_by_norm(grad, clip_norm)``: ``grad * clip_norm / max(norm, clip_norm)``, the
    norm over every element (an ``IndexedSlices``' norm is over its slices, which stay sparse).
    """
    if isinstance(grad, IndexedSlices):
        return IndexedSlices(
            _clip_values_by_norm(grad.values, clip_norm), grad.indices, grad.dense_shape
        )
    return _clip_values_by_norm(grad, clip_norm)


def _clip_values_by_norm(values: Any, clip_norm: Any) -> Any:
    xp = array_module(values)
    bound = values.dtype.type(clip_norm)
    l2sum = reduce_sum_all(values * values)
    # TF's two-tap where: the square root only of a positive sum; 0 (or NaN) stays as it is
    l2norm = xp.sqrt(l2sum) if bool(l2sum > 0) else l2sum
    return (values * bound) / xp.maximum(l2norm, bound)


def _clip_by_global_norm(grads: Sequence[Any], clip_norm: Any) -> list[Any]:
    """Keras's ``clip_by_global_norm``: every gradient times ``clip_norm * min(1 / norm,
    1 / clip_norm)`` (NaN everywhere when the norm is not finite), the norm over all of them.

    An ``IndexedSlices``' squares are summed over its dense form (TF's ``reduce_sum`` of
    squared slices), and the scaled gradient is dense (TF's ``slices * tensor``).

    Raises:
      InvalidArgumentError: for gradients of different float dtypes (Keras's norm is then of
        the wider dtype, and TF's ``Mul`` refuses the narrower gradient); ValueError where the
        narrower one is an ``IndexedSlices`` (TF's conversion refuses it first).
    """
    present = [g for g in grads if g is not None]
    squares = [reduce_sum_all(_dense_squares(g)) for g in present]
    dtype = np.result_type(*[s.dtype for s in squares])
    xp = array_module(*squares)
    use_norm = xp.sqrt(reduce_sum_all(xp.stack([s.astype(dtype) for s in squares])))
    # Keras's operands: 1.0 / norm in the norm's dtype; 1.0 / clip_norm a Python double
    scale = dtype.type(clip_norm) * xp.minimum(dtype.type(1.0) / use_norm, 1.0 / clip_norm)
    scale = scale + (use_norm - use_norm)
    out: list[Any] = []
    for g in grads:
        if g is None:
            out.append(None)
            continue
        if isinstance(g, IndexedSlices) and g.values.dtype != dtype:
            # TF converts the slices to the scale's dtype first, and refuses
            raise ValueError(
                f"Incompatible tensor conversion requested to `dtype` {np.dtype(dtype).name} "
                f"for IndexedSlices ({g!r})"
            )
        dense = to_dense(g) if isinstance(g, IndexedSlices) else g
        if dense.dtype != dtype:
            raise errors.InvalidArgumentError(
                None,
                "Mul",
                f"cannot compute Mul as input #1(zero-based) was expected to be a "
                f"{tf_dtype_name(dense.dtype)} tensor but is a {tf_dtype_name(dtype)} tensor "
                "[Op:Mul]",
            )
        out.append(dense * xp.asarray(scale, dtype))
    return out


def _dense_squares(grad: Any) -> Any:
    """``ops.square`` of a gradient, as ``reduce_sum`` sees it: an ``IndexedSlices``' squared
    slices in its dense form (repeated rows add ``a**2 + b**2``)."""
    if isinstance(grad, IndexedSlices):
        indices = array_module(grad.values).asarray(grad.indices).reshape(-1)
        shape = tuple(int(d) for d in np.asarray(grad.dense_shape))
        return _sparse.densify(indices, grad.values * grad.values, shape)
    return grad * grad


def _clip_by_value(grad: Any, bound: Any) -> Any:
    """``tf.clip_by_value(grad, -bound, bound)`` (an ``IndexedSlices``' slices clipped)."""
    if isinstance(grad, IndexedSlices):
        return IndexedSlices(_clip_values(grad.values, bound), grad.indices, grad.dense_shape)
    return _clip_values(grad, bound)


def _clip_values(values: Any, bound: Any) -> Any:
    xp = array_module(values)
    high, low = values.dtype.type(bound), values.dtype.type(-bound)
    return xp.maximum(xp.minimum(values, high), low)
