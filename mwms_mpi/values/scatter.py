"""The ``scatter_*`` family of a plain variable: TF 2.21's eager ``ResourceVariable`` kernels.

``Variable`` takes its ``scatter_add``/``sub``/``mul``/``div``/``min``/``max``/``update`` and
``batch_scatter_update`` from :class:`ScatterMixin`, so that ``variables.py`` stays one job and
under the size limit. The checks and their order are those of TF's kernels
(``ResourceScatterUpdateOp`` and ``ResourceScatterNdUpdate``), messages included, since a
program may observe them: the variable is updated row by row, so an out-of-range index leaves
the rows before it updated (``scatter_*``) or every valid row updated (``batch_scatter_update``),
as TF's CPU kernels do. Each method returns the variable read when used (TF's
``_lazy_read``: an ``UnreadVariable``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._tf_text import tf_dtype_name, tf_shape_string
from mwms_mpi.values.convert import as_array, convert_to_dtype
from mwms_mpi.values.indexed_slices import IndexedSlices

# TF's ``numbertype``: the dtypes its arithmetic scatter kernels accept, in the op's order.
_NUMBER_TYPES = (
    "float, double, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, "
    "bfloat16, qint16, quint16, uint16, complex128, half, uint32, uint64"
)
_OPS = {
    "add": "ResourceScatterAdd",
    "sub": "ResourceScatterSub",
    "mul": "ResourceScatterMul",
    "div": "ResourceScatterDiv",
    "min": "ResourceScatterMin",
    "max": "ResourceScatterMax",
    "update": "ResourceScatterUpdate",
}


tf_shape = tf_shape_string  # TF's ``TensorShape::DebugString``: ``[3,2]``, ``[]``


def _slice(shape: tuple[int, ...], flat: int) -> str:
    """TF's ``SliceDebugString``: where flat position ``flat`` lies in ``shape`` (``[1,0]``)."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def _sparse_delta(sparse_delta: Any) -> IndexedSlices:
    if not isinstance(sparse_delta, IndexedSlices):
        raise TypeError(
            f"Argument `sparse_delta` must be a `tf.IndexedSlices`. Received arg: {sparse_delta}"
        )
    return sparse_delta


def _indices(indices: Any, op: str) -> np.ndarray:
    """The indices as a host array; TF's kernels take int32 and int64 only."""
    array = np.asarray(_arrays.to_host(as_array(indices)))
    if array.dtype not in (np.int32, np.int64):
        raise errors.InvalidArgumentError(
            None,
            op,
            f"Value for attr 'Tindices' of {tf_dtype_name(array.dtype)} is not in the list of "
            "allowed values: int32, int64",
        )
    return array


def _check_kernel(dtype: np.dtype[Any], kind: str, op: str) -> None:
    """TF registers arithmetic scatters for number types, min/max for real ones only."""
    if kind != "update" and dtype.kind not in "iufc":
        raise errors.InvalidArgumentError(
            None,
            op,
            f"Value for attr 'dtype' of {tf_dtype_name(dtype)} is not in the list of allowed "
            f"values: {_NUMBER_TYPES}",
        )
    if kind in ("min", "max") and dtype.kind == "c":
        raise errors.InvalidArgumentError(
            None,
            op,
            f"No OpKernel was registered to support Op '{op}' used by {{{{node {op}}}}} with "
            f"these attrs: [dtype=DT_{tf_dtype_name(dtype).upper()}, Tindices=DT_INT32]",
        )


def _combine(kind: str, row: Any, update: Any) -> Any:
    """One row of TF's scatter functor; integer division truncates toward zero, as C++ does."""
    if kind == "add":
        return row + update
    if kind == "sub":
        return row - update
    if kind == "mul":
        return row * update
    if kind == "div":
        if row.dtype.kind in "iu":
            xp = _arrays.array_module(row, update)
            quotient = abs(row) // abs(update)
            return xp.asarray(xp.where((row < 0) != (update < 0), -quotient, quotient), row.dtype)
        return row / update
    if kind == "min":
        return _arrays.array_module(row, update).minimum(row, update)
    if kind == "max":
        return _arrays.array_module(row, update).maximum(row, update)
    return update


_UFUNCS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "min": np.minimum,
    "max": np.maximum,
}


def _apply_rows(result: Any, kind: str, index: np.ndarray, rows: Any) -> None:
    """Applies ``rows`` at ``index`` in order (repeated indices apply one after another).

    numpy's unbuffered ``ufunc.at`` and fancy assignment (the last of repeated indices wins)
    do it at once; integer division (C++ truncation) and device arrays go row by row.
    """
    host = not _arrays.is_device_array(result)  # (the tests' CuPy stand-in is an ndarray too)
    if host and kind == "update":
        result[index] = rows
    elif host and not (kind == "div" and result.dtype.kind in "iu"):
        _UFUNCS[kind].at(result, index, rows)
    else:
        for i, row in enumerate(index.tolist()):
            result[row] = _combine(kind, result[row], rows[i])


def scatter(value: Any, sparse_delta: IndexedSlices, kind: str) -> Any:
    """``value`` with ``sparse_delta`` applied by TF's ``ResourceScatter<kind>`` (a new array).

    Raises:
      InvalidArgumentError: TF's kernel messages, for shapes that do not fit, a zero divisor,
        an unsupported dtype or an index outside ``[0, value.shape[0])``. The rows before an
        out-of-range index are applied first (TF's serial CPU kernel); the array is then the
        ``.partial`` attribute of the error, for the caller to keep. (On large inputs TF's
        arithmetic kernels run in parallel shards and leave a thread-dependent set of rows
        written instead: 175,000 of 200,000 were measured for one ``scatter_add``.)
    """
    op = _OPS[kind]
    updates = _arrays.like(convert_to_dtype(sparse_delta.values, value.dtype), value)
    _check_kernel(np.dtype(value.dtype), kind, op)
    indices = _indices(sparse_delta.indices, op)
    if updates.ndim != 0 and updates.ndim != indices.ndim + value.ndim - 1:
        raise _shape_error(op, updates, indices, value)
    if kind == "div" and bool((updates == 0).any()):
        raise errors.InvalidArgumentError(None, op, "updates must not contain 0")
    result = value.copy()
    n = indices.size
    if n == 0:
        return result
    # TF views a 0-d variable (reachable with scalar updates only) as one row.
    work = result.reshape(1) if result.ndim == 0 else result
    if updates.ndim == 0:
        rows = _arrays.array_module(value).broadcast_to(updates, (n, *work.shape[1:]))
    else:
        if updates.shape[: indices.ndim] != indices.shape:
            raise errors.InvalidArgumentError(
                None,
                op,
                f"The shape of indices ({tf_shape(indices.shape)}) must be a prefix of the shape "
                f"of updates ({tf_shape(updates.shape)})",
            )
        if updates.size != n * int(np.prod(value.shape[1:], dtype=np.int64)):
            raise _shape_error(op, updates, indices, value)  # TF reads out of bounds here
        rows = updates.reshape((n, *value.shape[1:]))
    flat = indices.reshape(-1)
    limit = work.shape[0]
    bad = np.flatnonzero((flat < 0) | (flat >= limit))
    stop = int(bad[0]) if bad.size else n
    _apply_rows(work, kind, flat[:stop], rows[:stop])
    if stop < n:
        error = errors.InvalidArgumentError(
            None,
            op,
            f"indices{_slice(indices.shape, stop)} = {int(flat[stop])} is not in [0, {limit})",
        )
        error.partial = result  # type: ignore[attr-defined]
        raise error
    return result


def _shape_error(op: str, updates: Any, indices: Any, value: Any) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(
        None,
        op,
        "Must have updates.shape = indices.shape + params.shape[1:] or updates.shape = [], got "
        f"updates.shape {tf_shape(updates.shape)}, indices.shape {tf_shape(indices.shape)}, "
        f"params.shape {tf_shape(value.shape)}",
    )


def batch_scatter(value: Any, sparse_delta: IndexedSlices) -> Any:
    """``value`` with TF's ``batch_scatter_update`` applied (a new array).

    ``var[i_1, ..., i_n, indices[i_1, ..., i_n, j]] = updates[i_1, ..., i_n, j]``: TF builds
    the full coordinates and calls ``ResourceScatterNdUpdate``, whose checks these are.

    Raises:
      InvalidArgumentError: TF's messages. Every in-range row is written and the last
        out-of-range one is reported (TF's CPU kernel); the array is then the error's
        ``.partial``.
    """
    op = "ResourceScatterNdUpdate"
    indices = _indices(sparse_delta.indices, op)
    updates = _arrays.like(convert_to_dtype(sparse_delta.values, value.dtype), value)
    if value.ndim == 0:
        raise errors.InvalidArgumentError(
            None, op, f"Output must be at least 1-D, got shape: {tf_shape(value.shape)}"
        )
    depth = max(indices.ndim, 1)  # the coordinates per update: the prefix dims, then the index
    batch = indices.shape[:-1] if indices.ndim else ()
    lead = indices.shape[0] if indices.ndim else 1
    if updates.ndim == 0 or updates.shape[0] != lead:
        raise errors.InvalidArgumentError(
            None,
            op,
            f"Dimensions [0,1) of indices[shape={tf_shape((*indices.shape, depth))}] = {lead} must "
            f"match dimensions [0,1) of updates[shape={tf_shape(updates.shape)}] = "
            f"{updates.shape[0] if updates.ndim else 0}",
        )
    count = int(np.prod(indices.shape, dtype=np.int64))
    expected = (*indices.shape, *value.shape[depth:])
    if updates.shape != expected or depth > value.ndim:
        raise errors.InvalidArgumentError(
            None,
            op,
            f"Dimensions [{depth},{value.ndim}) of input[shape={tf_shape(value.shape)}] must match "
            f"dimensions [{indices.ndim},{updates.ndim}) of updates[shape="
            f"{tf_shape(updates.shape)}]",
        )
    grids = list(np.indices(indices.shape)[: len(batch)]) if batch else []
    coords = np.stack([g.reshape(-1) for g in grids] + [indices.reshape(-1)], axis=-1)
    rows = updates.reshape((count, *value.shape[depth:]))
    result = value.copy()
    bad = -1
    for loc in range(count):
        where = tuple(int(c) for c in coords[loc])
        if any(c < 0 or c >= value.shape[d] for d, c in enumerate(where)):
            bad = loc
            continue
        result[where] = rows[loc]
    if bad >= 0:
        error = errors.InvalidArgumentError(
            None,
            op,
            f"indices{_slice(indices.shape, bad)} = [{', '.join(str(int(c)) for c in coords[bad])}"
            f"] does not index into shape {tf_shape(value.shape)}",
        )
        error.partial = result  # type: ignore[attr-defined]
        raise error
    return result


class ScatterMixin:
    """``scatter_*`` and ``batch_scatter_update`` of ``Variable`` (TF's ``ResourceVariable``).

    Each takes a ``tf.IndexedSlices`` (``sparse_delta``); ``use_locking`` and ``name`` are
    accepted for TF's signature (there is one thread per variable update here). The values are
    converted to the variable's dtype as ``tf.convert_to_tensor`` does.

    Returns:
      The variable, read when used (an ``UnreadVariable``).

    Raises:
      TypeError: if ``sparse_delta`` is not an ``IndexedSlices`` (TF's message).
      InvalidArgumentError: TF's kernel errors (see :func:`scatter`).
    """

    _value: Any

    def _lazy_read(self) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _scatter(self, sparse_delta: Any, kind: str) -> Any:
        delta = _sparse_delta(sparse_delta)
        try:
            self._value = scatter(self._value, delta, kind)
        except errors.InvalidArgumentError as error:
            if hasattr(error, "partial"):  # the rows before the bad index stay written
                self._value = error.partial
                del error.partial  # the variable's storage is not the caller's to hold
            raise
        return self._lazy_read()

    def scatter_add(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Adds ``tf.IndexedSlices`` to this variable (repeated indices add up)."""
        return self._scatter(sparse_delta, "add")

    def scatter_sub(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Subtracts ``tf.IndexedSlices`` from this variable."""
        return self._scatter(sparse_delta, "sub")

    def scatter_mul(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Multiplies this variable by ``tf.IndexedSlices``."""
        return self._scatter(sparse_delta, "mul")

    def scatter_div(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Divides this variable by ``tf.IndexedSlices`` (integers truncate toward zero)."""
        return self._scatter(sparse_delta, "div")

    def scatter_min(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Updates this variable with the min of ``tf.IndexedSlices`` and itself."""
        return self._scatter(sparse_delta, "min")

    def scatter_max(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Updates this variable with the max of ``tf.IndexedSlices`` and itself."""
        return self._scatter(sparse_delta, "max")

    def scatter_update(self, sparse_delta: Any, use_locking: bool = False, name: Any = None) -> Any:
        """Assigns ``tf.IndexedSlices`` to this variable (of repeated indices, the last wins)."""
        return self._scatter(sparse_delta, "update")

    def batch_scatter_update(
        self, sparse_delta: Any, use_locking: bool = False, name: Any = None
    ) -> Any:
        """Assigns ``tf.IndexedSlices`` to this variable batch-wise (TF's ``batch_gather``
        analogue): the leading ``indices.ndim - 1`` dimensions are batch dimensions."""
        delta = _sparse_delta(sparse_delta)
        try:
            self._value = batch_scatter(self._value, delta)
        except errors.InvalidArgumentError as error:
            if hasattr(error, "partial"):  # the rows before the bad index stay written
                self._value = error.partial
                del error.partial  # the variable's storage is not the caller's to hold
            raise
        return self._lazy_read()
