"""The ``tf.nn`` loss helpers every custom training loop under a strategy uses.

``compute_average_loss`` divides a replica's summed per-example loss by the GLOBAL batch size,
and ``scale_regularization_loss`` divides a regularization loss by the number of replicas, so
that summing the replicas' gradients (what the optimizers do) gives the gradient of the mean.
Both read the current strategy from the thread's context, as TF's do.

A loss computed by an autodiff library (a ``jax.Array``, or a tracer inside ``jax.grad`` /
``jax.jit``) is computed on with its own library's operations (its array-API namespace,
``values/foreign.py``), never turned into numpy: the result stays differentiable. numpy input
takes the numpy path, unchanged (bitwise).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _context, errors
from mwms_mpi._tf_sum import reduce_sum_all
from mwms_mpi._tf_text import tf_api_dtype_name, tf_shape_string
from mwms_mpi.values.convert import as_array, truediv, truediv_dtype
from mwms_mpi.values.foreign import array_namespace

__all__ = ["compute_average_loss", "scale_regularization_loss"]


def _num_replicas_in_sync(api: str) -> int:
    """The current strategy's replica count; raises in its cross-replica context (TF's check).

    Raises:
      RuntimeError: inside a strategy's ``scope()`` but outside its replica functions.
    """
    if _context.has_strategy() and _context.in_cross_replica_context():
        raise RuntimeError(
            f"You are calling `{api}` in cross replica context, while it was expected to be "
            "called in replica context."
        )
    strategy = _context.current().strategy
    return 1 if strategy is None else int(strategy.num_replicas_in_sync)


def _scale_by_sample_weight(losses: np.ndarray, sample_weight: Any) -> np.ndarray:
    """TF's ``scale_losses_by_sample_weight``: float32 product, weights squeezed or expanded.

    Raises:
      InvalidArgumentError: weights that do not fit the losses (TF's ``Squeeze``/``Mul``).
    """
    losses = losses.astype(np.float32)
    weights = np.asarray(as_array(sample_weight)).astype(np.float32)
    if weights.ndim:
        if weights.ndim - losses.ndim == 1:
            if weights.shape[-1] != 1:
                raise errors.InvalidArgumentError(
                    None,
                    "Squeeze",
                    f"Can not squeeze dim[{weights.ndim - 1}], expected a dimension of 1, got "
                    f"{weights.shape[-1]} [Op:Squeeze]",
                )
            weights = np.squeeze(weights, -1)
        elif losses.ndim - weights.ndim == 1:
            weights = np.expand_dims(weights, -1)
    try:
        return np.asarray(np.multiply(losses, weights))
    except ValueError:  # numpy's broadcast error
        raise errors.InvalidArgumentError(
            None,
            "Mul",
            f"Incompatible shapes: {_dims(losses)} vs. {_dims(weights)} [Op:Mul]",
        ) from None


def _dims(array: np.ndarray) -> str:
    """A shape as TF's messages write it: ``[3,4]``."""
    return tf_shape_string(array.shape)


def compute_average_loss(
    per_example_loss: Any, sample_weight: Any = None, global_batch_size: Any = None
) -> np.ndarray:
    """Scales per-example losses with sample_weights and computes their average.

    Args:
      per_example_loss: Per-example loss (at least one dimension).
      sample_weight: Optional weighting for each example.
      global_batch_size: Optional global batch size value. Defaults to (size of first
        dimension of ``per_example_loss``) * (number of replicas).

    Returns:
      Scalar loss value, obtained by summing the ``per_example_loss`` and dividing by
      ``global_batch_size``. If ``global_batch_size`` is zero, the result is zero.

    Raises:
      ValueError: for a scalar ``per_example_loss`` or a non-scalar ``global_batch_size``.
      TypeError: for a ``global_batch_size`` that is not an integer.
      InvalidArgumentError: for a negative ``global_batch_size``, or a bool loss (TF's).
      RuntimeError: when called in cross-replica context without ``global_batch_size``.

    As TF's ``div_no_nan``, integer losses average into floats (``truediv``'s dtypes: float32
    for 8- and 16-bit integers, float64 for wider ones); floating losses keep their dtype.
    """
    xp = array_namespace(per_example_loss)
    if xp is not np:
        return _average_in_namespace(xp, per_example_loss, sample_weight, global_batch_size)
    losses = np.asarray(as_array(per_example_loss))
    input_dtype = losses.dtype
    if losses.ndim == 0:
        raise ValueError(
            "Invalid value passed for `per_example_loss`. Expected a tensor with at least rank "
            f"1. Received per_example_loss={losses} with rank 0"
        )
    if sample_weight is not None:
        losses = _scale_by_sample_weight(losses, sample_weight)
    losses = losses.astype(input_dtype)
    if global_batch_size is None:
        replicas = _num_replicas_in_sync("compute_average_loss")
        global_batch_size = np.int32(losses.shape[0] * replicas)
    batch = np.asarray(as_array(global_batch_size))
    _check_global_batch_size(batch)
    _refuse_bool(input_dtype)
    total = reduce_sum_all(losses)  # TF's addition order: TF's last bits
    if batch == 0:  # div_no_nan: 0, of the division's dtype
        return np.asarray(truediv(np.zeros((), input_dtype), 1))
    return np.asarray(truediv(total, batch.astype(input_dtype)))


def _refuse_bool(dtype: Any) -> None:
    """TF's ``reduce_sum`` has no bool kernel.

    Raises:
      InvalidArgumentError: for a bool ``dtype`` (TF's message).
    """
    if np.dtype(dtype).kind == "b":
        raise errors.InvalidArgumentError(
            None,
            "Sum",
            "Value for attr 'T' of bool is not in the list of allowed values: float, double, "
            "int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
            "qint16, quint16, uint16, complex128, half, uint32, uint64",
        )


def _check_global_batch_size(batch: np.ndarray) -> None:
    """TF's checks of ``global_batch_size`` (a concrete number, whatever the loss's library).

    Raises:
      ValueError: for a non-scalar; TypeError: for a non-integer; InvalidArgumentError: < 0.
    """
    if batch.ndim:
        raise ValueError(
            "global_batch_size must be scalar..  Expected scalar shape, saw shape: "
            f"{tuple(batch.shape)}."
        )
    if batch.dtype.kind not in "iu":
        raise TypeError(
            'global_batch_size must be an integer..  Expected "x" to be integer type.  Found: '
            f"tensor of dtype <dtype: '{tf_api_dtype_name(batch.dtype)}'>"
        )
    if batch < 0:
        raise errors.InvalidArgumentError(
            None, "assert_non_negative", "global_batch_size must be non-negative."
        )


def _astype(xp: Any, x: Any, dtype: Any) -> Any:
    """The array API's ``astype`` (a namespace function), or the array's method where the
    namespace predates it."""
    fn = getattr(xp, "astype", None)
    return fn(x, dtype) if fn is not None else x.astype(dtype)


def _average_in_namespace(xp: Any, losses: Any, sample_weight: Any, global_batch_size: Any) -> Any:
    """``compute_average_loss`` with the loss's own library ``xp`` (differentiable there).

    The same steps and dtypes as the numpy path: float32 weighting, the sum in the input's
    dtype, divided by the global batch size with TF's ``truediv`` dtypes, 0 for a batch of 0.
    """
    input_dtype = losses.dtype
    if losses.ndim == 0:
        raise ValueError(
            "Invalid value passed for `per_example_loss`. Expected a tensor with at least rank "
            f"1. Received per_example_loss={losses} with rank 0"
        )
    if sample_weight is not None:
        scaled = _astype(xp, losses, xp.float32)
        weights = _astype(xp, xp.asarray(sample_weight), xp.float32)
        if weights.ndim - scaled.ndim == 1:
            weights = xp.squeeze(weights, axis=-1)
        elif weights.ndim and scaled.ndim - weights.ndim == 1:
            weights = xp.expand_dims(weights, axis=-1)
        losses = _astype(xp, scaled * weights, input_dtype)
    if global_batch_size is None:
        replicas = _num_replicas_in_sync("compute_average_loss")
        global_batch_size = np.int32(losses.shape[0] * replicas)
    batch = np.asarray(as_array(global_batch_size))
    _check_global_batch_size(batch)
    _refuse_bool(input_dtype)
    total = xp.sum(losses, dtype=input_dtype)
    if batch == 0:  # div_no_nan: 0, of the division's dtype
        return _divide_in_namespace(xp, xp.zeros((), dtype=input_dtype), 1)
    return _divide_in_namespace(xp, total, batch.item())


def scale_regularization_loss(regularization_loss: Any) -> np.ndarray:
    """Scales the sum of the given regularization losses by number of replicas.

    Args:
      regularization_loss: Regularization loss.

    Returns:
      Scalar loss value.

    Raises:
      RuntimeError: when called in cross-replica context.
    """
    replicas = _num_replicas_in_sync("scale_regularization_loss")
    xp = array_namespace(regularization_loss)
    if xp is not np:
        return _scale_in_namespace(xp, regularization_loss, replicas)
    loss = np.asarray(as_array(regularization_loss))
    total = reduce_sum_all(loss)  # TF's addition order: TF's last bits (numpy's pairwise differs)
    return np.asarray(truediv(total, replicas))


def _scale_in_namespace(xp: Any, loss: Any, replicas: int) -> Any:
    """``scale_regularization_loss`` with the loss's own library ``xp``: the sum divided by
    the replica count with TF's ``truediv`` dtypes (as ``convert.truediv``)."""
    return _divide_in_namespace(xp, xp.sum(loss, dtype=loss.dtype), replicas)


def _divide_in_namespace(xp: Any, total: Any, divisor: int) -> Any:
    """``total / divisor`` in ``xp`` with TF's ``truediv`` dtypes (``convert.truediv_dtype``:
    integers into float32 or float64, floats kept).

    Raises:
      TypeError: for a bool ``total`` (TF has no division of bools).
    """
    target = truediv_dtype(total.dtype)
    if target != np.dtype(total.dtype):
        total = _astype(xp, total, target)
    return total / xp.asarray(divisor, dtype=target)
