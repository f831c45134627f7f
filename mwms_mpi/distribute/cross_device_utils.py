"""What a worker does with its own replicas' values: TF's ``cross_device_utils`` in numpy.

Local sums in replica order (``add_n``), sparse concatenation, copies onto destinations, and
the dtypes TF's collective kernels accept. No communication: ``cross_device_ops`` adds that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._config import switches
from mwms_mpi._tf_text import tf_api_dtype_name, tf_dtype_name, tf_shape_string
from mwms_mpi.collective.deterministic import local_exact_sum
from mwms_mpi.collective.exact import supports as exact_supports
from mwms_mpi.types import ReduceOp
from mwms_mpi.values import DistributedValues, IndexedSlices, Mirrored, PerReplica
from mwms_mpi.values.convert import as_array, truediv

# What TF's CollectiveReduceV2 / CollectiveGatherV2 kernels accept (measured on TF 2.21; numpy
# has no bfloat16). TF's names for the error messages.
_REDUCE_DTYPES = frozenset(
    np.dtype(name) for name in ("float16", "float32", "float64", "int32", "int64")
)
_GATHER_DTYPES = _REDUCE_DTYPES


def check_collective_reduce_dtype(dtype: Any) -> None:
    """Raises as TF's collective all-reduce does for a dtype its kernel does not take.

    Raises:
      InvalidArgumentError: for anything but float16/32/64, int32 and int64 (TF's message).
    """
    if dtype not in _REDUCE_DTYPES and _arrays.native_dtype(dtype) not in _REDUCE_DTYPES:
        raise errors.InvalidArgumentError(
            None,
            "CollectiveReduceV2",
            f"Value for attr 'T' of {tf_dtype_name(dtype)} is not in the list of allowed "
            "values: bfloat16, float, half, double, int32, int64",
        )


def check_collective_gather_dtype(dtype: Any) -> None:
    """Raises as TF's collective all-gather does for a dtype its kernel does not take.

    Raises:
      TypeError: for anything but float16/32/64, int32 and int64 (TF's message).
    """
    if dtype not in _GATHER_DTYPES and _arrays.native_dtype(dtype) not in _GATHER_DTYPES:
        raise TypeError(  # TF's Python name here (``float32``), not its kernel's
            f"Value passed to parameter 'input' has DataType {tf_api_dtype_name(dtype)} not in "
            "list of allowed values: float32, float16, float64, int32, int64"
        )


def replica_value(value: Any) -> Any:
    """The value-kind rule of the cross-device ops, its one home: what their
    ``*_implementation`` methods receive. A ``DistributedValues`` and an array (one replica's
    value, as TF documents "or a ``tf.Tensor`` like object") pass as they are: a step's result
    at k = 1 is an array, and wrapping every gradient would cost more than its reduction's
    Python. Anything else (a Python number, a list, a variable) becomes a one-replica
    ``PerReplica`` of its converted value (TF's ``_make_tensor_into_per_replica``).
    """
    kind = type(value)  # an array as ``values.convert.as_array`` takes it as it is
    if kind is np.ndarray or isinstance(value, DistributedValues) or _arrays.is_device_array(value):
        return value
    return PerReplica((as_array(value),))


class ArrayPairs(list[tuple[Any, Any]]):
    """Normalised ``(value, destinations)`` pairs that are all plain numpy arrays: the batch
    of a k = 1 step's gradients, each reduced onto itself.

    The value-kind rule, decided once for the whole batch where the pairs are normalised
    (``cross_device_ops._normalize_pairs``, the only maker): each value is then its own one
    replica's value (:func:`replica_value`, :func:`local_values`) and each result its own
    destination (:func:`mirror`), so an implementation reads the type instead of asking those
    rules once per gradient.
    """


def local_values(value: Any) -> tuple[Any, ...]:
    """The values of this worker's replicas: a ``DistributedValues``'s, or a lone value alone
    (what :func:`replica_value` passes on)."""
    return value._values if isinstance(value, DistributedValues) else (value,)


def mirror(result: Any, destinations: Any) -> Any:
    """``result`` (new, not the caller's) on each device ``destinations`` names (TF's
    ``simple_broadcast``): itself for one device, else a ``Mirrored`` of copies.

    A ``DistributedValues`` (a distributed variable too) names one device per component;
    anything else (a device string, an array, a variable) one.
    """
    if not isinstance(destinations, DistributedValues):
        return result
    count = len(destinations._values)
    if count == 1:
        return result
    return Mirrored([result, *(result.copy() for _ in range(count - 1))])


def _add_n_refuses(dtype: Any) -> str:
    """TF's message when ``add_n`` has no kernel for ``dtype`` (bool, string)."""
    name = "string" if dtype.kind in "SU" else dtype.name
    return (
        f"Value for attr 'T' of {name} is not in the list of allowed values: float, double, "
        "int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, qint16, "
        "quint16, uint16, complex128, half, uint32, uint64, variant\n\t; NodeDef: {{node AddN}}; "
        "Op<name=AddN; signature=inputs:N*T -> sum:T; attr=N:int,min=1; attr=T:type,allowed=["
        "DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_COMPLEX64, DT_INT64, "
        "DT_QINT8, DT_QUINT8, DT_QINT32, DT_BFLOAT16, DT_QINT16, DT_QUINT16, DT_UINT16, "
        "DT_COMPLEX128, DT_HALF, DT_UINT32, DT_UINT64, DT_VARIANT]; is_commutative=true; "
        "is_aggregate=true> [Op:AddN] name: "
    )


def local_sum(
    values: Sequence[Any],
    accumulation_fn: Callable[[list[Any]], Any] | None,
    divisor: int = 1,
) -> Any:
    """``add_n`` of this worker's replicas' dense values, in replica order (a fresh array).

    With op determinism on, a float sum is the exact sum, divided by ``divisor`` (a MEAN's
    replica count) before its one rounding; otherwise ``divisor`` must be 1.

    Raises:
      InvalidArgumentError: for bool or string values (TF's ``add_n`` has no kernel for them:
        its message), or replicas whose values differ in dtype or shape.
    """
    arrays = [as_array(v) for v in values]
    if accumulation_fn is not None:
        return as_array(accumulation_fn(arrays))
    first = arrays[0]
    dtype = first.dtype
    if dtype.kind in "bSU":
        raise errors.InvalidArgumentError(None, "AddN", _add_n_refuses(dtype))
    for a in arrays[1:]:
        if a.dtype != dtype or a.shape != first.shape:
            raise errors.InvalidArgumentError(
                None,
                "reduce",
                f"replicas passed different values to reduce: {a.dtype}{list(a.shape)} != "
                f"{dtype}{list(first.shape)} on replica 0",
            )
    if exact_sums_for(dtype):  # op determinism: the same bits as any split over ranks
        exact = local_exact_sum([_arrays.to_host(a) for a in arrays], divisor)  # numpy
        return _arrays.like(exact, first)
    if len(arrays) == 1:
        return first.copy()
    xp = _arrays.array_module(first)
    out = xp.add(first, _arrays.like(arrays[1], first), out=xp.empty(first.shape, dtype))
    for a in arrays[2:]:
        xp.add(out, _arrays.like(a, first), out=out)
    return out


def local_concat(values: Sequence[Any]) -> IndexedSlices:
    """This worker's replicas' ``IndexedSlices`` concatenated in replica order (contiguous)."""
    first = values[0]
    xp = _arrays.array_module(first.values)  # CuPy slices are concatenated on the first's GPU
    if len(values) == 1:
        return IndexedSlices(
            xp.ascontiguousarray(first.values),
            xp.ascontiguousarray(first.indices),
            first.dense_shape,
        )
    parts = [_arrays.like(xp.asarray(s.values), first.values) for s in values]
    check_concat(parts)
    return IndexedSlices(
        xp.concatenate(parts),
        xp.concatenate([_arrays.like(xp.asarray(s.indices), first.indices) for s in values]),
        first.dense_shape,
    )


def check_concat(arrays: Sequence[Any], axis: int = 0) -> None:
    """TF's ``ConcatV2`` checks of the in-process concat (numpy would promote dtypes, and its
    errors are ``ValueError``s): one dtype, one rank, equal dimensions but ``axis``.

    Raises:
      InvalidArgumentError: with TF's message, for the first array that differs from the first.
    """
    first = arrays[0]

    def fail(text: str) -> errors.InvalidArgumentError:
        return errors.InvalidArgumentError(None, "ConcatV2", f"{text} [Op:ConcatV2] name: concat")

    for i, a in enumerate(arrays[1:], 1):
        shapes = (
            f"shape[0] = {tf_shape_string(first.shape)} vs. shape[{i}] = {tf_shape_string(a.shape)}"
        )
        if a.dtype != first.dtype:
            raise fail(
                f"cannot compute ConcatV2 as input #{i}(zero-based) was expected to be a "
                f"{tf_dtype_name(first.dtype)} tensor but is a {tf_dtype_name(a.dtype)} tensor"
            )
        if a.ndim != first.ndim:
            raise fail(f"ConcatOp : Ranks of all input tensors should match: {shapes}")
        for d in range(first.ndim):
            if d != axis % first.ndim and a.shape[d] != first.shape[d]:
                raise fail(f"ConcatOp : Dimension {d} in both shapes must be equal: {shapes}")


def mean_divisors(reduce_op: ReduceOp, dtype: Any, n: int) -> tuple[int, int | None]:
    """TF's MEAN, the one rule: the SUM over ``n`` replicas divided by ``n``. Where the division
    happens, as ``(inside, after)``:

    * with op determinism on, a float (or complex) MEAN divides the exact sum before its one
      rounding: ``(n, None)``, ``n`` being the collective's (or ``local_sum``'s) ``divisor``;
    * any other MEAN divides the rounded sum with TF's ``truediv`` (:func:`divide`):
      ``(1, n)``, even for ``n == 1`` (an int32 MEAN is float64, as in TF);
    * a SUM divides nothing: ``(1, None)``.
    """
    if reduce_op is not ReduceOp.MEAN:
        return 1, None
    if np.dtype(dtype).kind in "fc" and exact_sums_for(dtype):
        return n, None
    return 1, n


def divide(value: Any, n: int | None, owned: bool) -> Any:
    """``value`` (a sum) divided after its rounding as :func:`mean_divisors` says (``n``; none
    for ``None``): TF's ``truediv``, on an ``IndexedSlices``'s values."""
    if n is None:
        return value
    if isinstance(value, IndexedSlices):
        return IndexedSlices(truediv(value.values, n, owned), value.indices, value.dense_shape)
    return truediv(value, n, owned)


def simple_reduce(
    values: Sequence[Any],
    reduce_op: ReduceOp,
    accumulation_fn: Callable[[list[Any]], Any] | None = None,
) -> Any:
    """TF's ``_simple_reduce``: one worker's values summed (sparse: concatenated), then divided.

    With op determinism on, a float MEAN divides the exact sum before its one rounding.
    """
    k = len(values)
    if type(values[0]) is IndexedSlices:  # concatenated: no sum to divide inside
        return divide(local_concat(values), k if reduce_op is ReduceOp.MEAN else None, True)
    inside, after = mean_divisors(reduce_op, as_array(values[0]).dtype, k)
    if accumulation_fn is not None and inside != 1:  # the user's sum: divided after it
        inside, after = 1, k
    return divide(local_sum(values, accumulation_fn, inside), after, True)


def exact_sums_for(dtype: Any) -> bool:
    """Whether op determinism is on and a SUM of ``dtype`` is therefore an exact sum."""
    return switches.op_determinism and exact_supports(dtype)


def check_gather_axis(arrays: Sequence[Any], axis: int) -> None:
    """TF's collective all_gather moves ``axis`` to the front with the permutation
    ``concat([axis], range(axis), range(axis + 1, rank))``, built before its kernel runs (so
    before the dtype and shape checks): a negative axis fails in the first ``range``, an axis
    at or past the rank (any axis of a 0-d value) in the second. Only the collective gather
    (``CollectiveAllReduce``) checks it; one replica in all gathers nothing and checks nothing
    (the callers' shortcut), and the in-process gather is a concat (``concat_for_gather``).

    Raises:
      ValueError: TF's ``Range`` error, for the first replica value the permutation fails for.
    """
    for array in arrays:
        if axis < 0:
            bounds, node, limit = (0, axis), "allgather/range", "allgather/range/limit"
        elif axis + 1 > array.ndim:
            bounds, node, limit = (axis + 1, array.ndim), "allgather/range_1", "allgather/Rank"
        else:
            continue
        start, end = bounds
        raise ValueError(
            f"Requires start <= limit when delta > 0: {start}/{end} for '{{{{node {node}}}}} = "
            f"Range[Tidx=DT_INT32]({node}/start, {limit}, {node}/delta)' with input shapes: "
            f"[], [], [] and with computed input tensors: input[0] = <{start}>, "
            f"input[1] = <{end}>, input[2] = <1>."
        )


def concat_for_gather(values: Sequence[Any], axis: int) -> np.ndarray:
    """This worker's replicas' values concatenated along ``axis`` (TF's checks first).

    This is TF's in-process gather (``array_ops.concat``: MirroredStrategy's int32 values), so
    a negative axis counts from the end and a bad one fails as TF's ``ConcatV2`` kernel does;
    the collective gather checks ``check_gather_axis`` before it comes here.

    Raises:
      InvalidArgumentError: if replicas' ranks or dtypes differ, or other dimensions do; for an
        axis outside ``[-rank, rank)`` and for 0-d values (TF's ``ConcatOp`` messages).
    """
    arrays = [as_array(v) for v in values]
    first = arrays[0]
    for a in arrays[1:]:
        if a.dtype != first.dtype or a.ndim != first.ndim:
            raise errors.InvalidArgumentError(
                None,
                "all_gather",
                f"all_gather: replicas passed {a.dtype}{list(a.shape)} and "
                f"{first.dtype}{list(first.shape)}: ranks and dtypes must agree",
            )
    rank = first.ndim
    if not (-rank <= axis < rank or (rank == 0 and axis == 0)):
        raise errors.InvalidArgumentError(
            None,
            "ConcatV2",
            f"ConcatOp : Expected concatenating dimensions in the range [{-rank}, {rank}), but "
            f"got {axis} [Op:ConcatV2] name: concat",
        )
    if rank == 0:
        raise errors.InvalidArgumentError(
            None,
            "ConcatV2",
            "ConcatOp : Can't concatenate scalars (use tf.stack instead) [Op:ConcatV2] "
            "name: concat",
        )
    if len(arrays) == 1:
        return first
    xp = _arrays.array_module(first)  # k local GPUs: concatenated on the first replica's
    try:
        return xp.concatenate([_arrays.like(a, first) for a in arrays], axis=axis)
    except ValueError as exc:
        raise errors.InvalidArgumentError(None, "all_gather", f"all_gather: {exc}") from exc
