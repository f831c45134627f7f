"""The plan step of every collective: arguments checked, the layout, its digest and its buffers.

Each public method is one collective's plan step in the call template (``protocol.py``): it
checks the call's arguments (``array_checks.py``: raising errors the template refuses on every
rank, ``arguments.py``), chooses the backend of the arrays' kind, and returns the plan with this
rank's value to agree on. A call whose layout this rank has seen costs a dict lookup here
instead of hashing the layout, validating dtypes and planning packs again. The caches are
local and change nothing about which MPI calls a rank makes: every call is still agreed
(``agreement.py``), so a rank whose cache differs from its peers' cannot make a different
collective unnoticed. Eviction is FIFO, by count (:data:`MAX_PLANS` per kind): LRU order would
cost a dict update on every hit of the hot path, and an evicted layout is only planned again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._arrays import native_dtype
from mwms_mpi._config import switches
from mwms_mpi.collective import packing
from mwms_mpi.collective.agreement import VALUE_LIMIT
from mwms_mpi.collective.arguments import refusable
from mwms_mpi.collective.array_checks import (
    check_device,
    check_divisor,
    check_one_kind,
    check_out,
)
from mwms_mpi.collective.backends import CollectiveBackend, select
from mwms_mpi.collective.dtypes import gatherable, normalize_axis, wire_dtype
from mwms_mpi.collective.exact import ExactSum, real_dtype
from mwms_mpi.collective.exact import supports as exact_supports
from mwms_mpi.collective.ops import Op, as_op
from mwms_mpi.collective.pool import BufferPool
from mwms_mpi.collective.signature import ANY, Layout, digest
from mwms_mpi.types import CommunicationOptions

MAX_PLANS = 1024  # per kind; the oldest is evicted first (FIFO: a hit stays one dict lookup)


def device_extra(backend: Any) -> tuple[tuple[str, object], ...]:
    """What a layout says about its arrays' kind and transport: nothing for host arrays, else
    ``arrays=cupy`` and the agreed transport (so that ranks passing numpy where others pass
    CuPy, or moving them differently, disagree instead of making different MPI calls)."""
    if backend.name == "host":
        return ()
    return (("arrays", _arrays.DEVICE), ("transport", backend.name))


class ReducePlan(NamedTuple):
    """An all-reduce layout: the op, what is agreed, and where its results come from."""

    op: Op
    layout: Layout
    digest: int
    results: Callable[[], Any]  # a new result array (pool.Source.take)
    as_bytes: bool  # bool arrays travel as uint8 (MPI has no MAX/MIN for C bool)
    exact: ExactSum | None  # a float SUM while op determinism is on: exact-then-rounded
    backend: CollectiveBackend
    skippable: bool = True  # MWMS_MPI_CHECK=first may trust it once agreed


class BatchPlan(NamedTuple):
    """A batch all-reduce layout: the op, what is agreed, and TF's packing of its arrays."""

    op: Op
    layout: Layout
    digest: int
    chunks: tuple[packing.Chunk, ...]
    groups: tuple[tuple[tuple[int, ...], ExactSum | None], ...] | None  # deterministic: by dtype
    backend: CollectiveBackend
    skippable: bool = True


class GatherPlan(NamedTuple):
    """A gather layout (the gathered axis free), its digest and the normalised axis."""

    layout: Layout
    digest: int
    axis: int
    backend: CollectiveBackend
    skippable: bool = False  # each call agrees its row count


class LayoutPlan(NamedTuple):
    """A layout and its digest (broadcasts, barriers, value agreements)."""

    layout: Layout
    digest: int
    backend: CollectiveBackend | None = None
    skippable: bool = False


_BARRIER_LAYOUT = Layout("barrier", "", ())
BARRIER = LayoutPlan(_BARRIER_LAYOUT, digest(_BARRIER_LAYOUT))


def _remember(cache: dict[Any, Any], key: Any, plan: Any) -> Any:
    if len(cache) >= MAX_PLANS:
        del cache[next(iter(cache))]
    cache[key] = plan
    return plan


Planned = tuple[Any, int]  # a plan and this rank's value to agree on


class Plans:
    """The plan steps of one communicator's collectives, with their plans by layout.

    Each ``plan`` method takes the call's merged options and the collective's arguments, and
    returns ``(plan, value)`` (the call template's plan step).

    Args:
      name: the communicator's name, for error messages.
      rank: the communicator's rank, for error messages.
      size: the communicator's size (every rank contributes addends to a SUM).
      pool: the communicator's buffer pool (where all-reduce results come from).
      backends: the ordered backends; the first that supports an array moves it.
    """

    def __init__(
        self,
        name: str,
        rank: int,
        size: int,
        pool: BufferPool,
        backends: Sequence[CollectiveBackend],
    ) -> None:
        self._name = name
        self._rank = rank
        self._size = size
        self._pool = pool
        self.backends = list(backends)
        self.host = select(self.backends, np.empty(0))
        self._by_type: dict[type, CollectiveBackend] = {}
        self._reduces: dict[Any, ReducePlan] = {}
        self._addends: dict[Any, ReducePlan] = {}
        self._batches: dict[Any, BatchPlan] = {}
        self._broadcasts: dict[Any, LayoutPlan] = {}
        self._gathers: dict[Any, GatherPlan] = {}
        self._agreements: dict[str, LayoutPlan] = {}

    def backend(self, array: Any) -> CollectiveBackend:
        """The backend that moves ``array``'s kind of array.

        Raises:
          TypeError: when no backend supports it (refusable).
        """
        kind = type(array)
        found = self._by_type.get(kind)
        if found is None:
            try:
                found = self._by_type[kind] = select(self.backends, array)
            except TypeError as exc:
                raise refusable(exc) from None
        return found

    # -- reductions --------------------------------------------------------------------------

    def all_reduce(self, opts: CommunicationOptions, array: Any, op: Op | str, out: Any) -> Planned:
        """The plan of ``all_reduce(array, op, out=out)`` (a dict lookup for a seen layout)."""
        backend = self._by_type.get(type(array)) or self.backend(array)
        det = switches.op_determinism
        given = out is not None
        key = (op, array.dtype, array.shape, det, backend, given)
        plan = self._reduces.get(key)
        if plan is None:
            plan = self._reduce_plan(op, array.dtype, array.shape, 1, det, backend)
            if given:
                layout = plan.layout._replace(extra=(*plan.layout.extra, ("out", True)))
                plan = plan._replace(layout=layout, digest=digest(layout))
            _remember(self._reduces, key, plan)
        if given:
            check_out(out, array, backend, self._rank)
        if backend.device is not None:
            check_device(
                "all_reduce", self._rank, backend.device, (array, out) if given else (array,)
            )
        return plan, 0

    def addends(
        self, opts: CommunicationOptions, addends: Sequence[Any], op: Op | str, divisor: int
    ) -> Planned:
        """The plan of an all-reduce of a rank's local ``addends`` (all of one layout).

        Raises:
          InvalidArgumentError: if the addends' shapes or dtypes differ, or as ``all_reduce``.
          ValueError: for a ``divisor`` other than 1 on anything but a float SUM.
        """
        if not addends:
            raise refusable(ValueError("all_reduce_addends: no addends to reduce"))
        first = addends[0]
        backend = self.backend(first)
        check_one_kind("all_reduce", self._rank, addends)
        for i, a in enumerate(addends[1:], 1):
            if a.dtype != first.dtype or a.shape != first.shape:
                raise errors.InvalidArgumentError(
                    None,
                    "all_reduce",
                    f"all_reduce on rank {self._rank}: local replicas passed different values "
                    f"to reduce: {a.dtype}{list(a.shape)} on replica {i} != "
                    f"{first.dtype}{list(first.shape)} on replica 0",
                )
        det = switches.op_determinism
        key = (op, first.dtype, first.shape, len(addends), det, divisor, backend)
        plan = self._addends.get(key)
        if plan is None:
            local = len(addends)
            plan = self._reduce_plan(op, first.dtype, first.shape, local, det, backend)
            check_divisor("all_reduce_addends", divisor, plan.op, [first.dtype])
            if divisor != 1:
                layout = plan.layout._replace(extra=(*plan.layout.extra, ("divisor", divisor)))
                plan = plan._replace(layout=layout, digest=digest(layout))
            plan = _remember(self._addends, key, plan)
        if backend.device is not None:  # addends are combined into a buffer on its device
            check_device("all_reduce", self._rank, backend.device, ())
        return plan, 0

    def _reduce_plan(
        self,
        op: Op | str,
        dtype: Any,
        shape: tuple[int, ...],
        local: int,
        deterministic: bool,
        backend: CollectiveBackend,
    ) -> ReducePlan:
        checked = as_op(op)
        wire_dtype(dtype, checked, "all_reduce", self._rank)
        extra: list[tuple[str, object]] = [("local addends", local)] if local > 1 else []
        exact = None
        if deterministic and checked is Op.SUM and exact_supports(dtype):
            exact = _exact_plan(dtype, int(np.prod(shape, dtype=np.int64)), self._size * local)
            extra.append(("deterministic", True))
        extra.extend(device_extra(backend))
        layout = Layout("all_reduce", checked.value, ((dtype.name, shape),), tuple(extra))
        results = self._pool.source(shape, native_dtype(dtype), backend.empty, backend.name).take
        as_bytes = dtype.kind == "b"
        return ReducePlan(checked, layout, digest(layout), results, as_bytes, exact, backend)

    def batch(
        self, opts: CommunicationOptions, arrays: Sequence[Any], op: Op | str, divisor: int
    ) -> Planned:
        """The plan of a batch all-reduce of ``arrays`` (TF's packs, one chunk per dtype; a
        deterministic SUM: one group per dtype, exact for floats, ``bytes_per_pack`` unused).

        Raises:
          InvalidArgumentError: if host and device arrays are mixed, or a dtype cannot be
            reduced with ``op``.
          TypeError: if no backend supports an array.
          ValueError: for a ``divisor`` other than 1 on anything but float SUMs.
        """
        det = switches.op_determinism
        backend = self.backend(arrays[0]) if arrays else self.host
        check_one_kind("batch_all_reduce", self._rank, arrays)  # every call: not in the key
        key = _batch_key(op, arrays, opts.bytes_per_pack, det, backend)
        plan = self._batches.get(key)
        if plan is None:
            plan = _remember(self._batches, key, self._new_batch(op, arrays, opts, det, backend))
        if divisor != 1:
            check_divisor("batch_all_reduce", divisor, plan.op, [a.dtype for a in arrays])
        if backend.device is not None:
            check_device("batch_all_reduce", self._rank, backend.device, arrays)
        return plan, 0

    def _new_batch(
        self,
        op: Op | str,
        arrays: Sequence[Any],
        opts: CommunicationOptions,
        deterministic: bool,
        backend: CollectiveBackend,
    ) -> BatchPlan:
        for a in arrays[1:]:
            self.backend(a)  # an unsupported type raises
        checked = as_op(op)
        wires = [wire_dtype(a.dtype, checked, "batch_all_reduce", self._rank) for a in arrays]
        extra: list[tuple[str, object]] = [("bytes_per_pack", opts.bytes_per_pack)]
        groups = None
        if deterministic and checked is Op.SUM:
            groups = self._exact_groups(arrays)
            extra.append(("deterministic", True))
        if arrays:
            extra.extend(device_extra(backend))
        chunks = packing.plan_batch(wires, [a.shape for a in arrays], opts.bytes_per_pack)
        items = tuple((a.dtype.name, a.shape) for a in arrays)
        layout = Layout("batch_all_reduce", checked.value, items, tuple(extra))
        return BatchPlan(checked, layout, digest(layout), chunks, groups, backend)

    def _exact_groups(
        self, arrays: Sequence[Any]
    ) -> tuple[tuple[tuple[int, ...], ExactSum | None], ...]:
        """The arrays' positions by dtype, in order of first appearance, each with its plan."""
        by_dtype: dict[Any, list[int]] = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault(native_dtype(a.dtype), []).append(i)
        groups = []
        for dtype, positions in by_dtype.items():
            count = sum(int(np.prod(arrays[i].shape, dtype=np.int64)) for i in positions)
            plan = _exact_plan(dtype, count, self._size) if exact_supports(dtype) else None
            groups.append((tuple(positions), plan))
        return tuple(groups)

    # -- gathers, broadcasts, agreements -----------------------------------------------------

    def gather(self, opts: CommunicationOptions, array: Any, axis: int, _: Any = None) -> Planned:
        """The plan of an ``all_gather`` of ``array`` along ``axis``, and its row count.

        Raises:
          ValueError: for a 0-d array or an axis out of range.
          InvalidArgumentError: for a dtype MPI cannot move.
        """
        backend = self.backend(array)
        key = ("dense", array.dtype, array.shape, axis, backend)
        plan = self._gathers.get(key)
        if plan is None:
            axis = normalize_axis(array, axis, "all_gather")
            gatherable(array.dtype, "all_gather")
            rest = array.shape[:axis] + array.shape[axis + 1 :]
            extra = (("axis", axis), *device_extra(backend))
            layout = Layout("all_gather", "", ((array.dtype.name, (ANY, *rest)),), extra)
            plan = _remember(self._gathers, key, GatherPlan(layout, digest(layout), axis, backend))
        if backend.device is not None:
            check_device("all_gather", self._rank, backend.device, (array,))
        return plan, int(array.shape[plan.axis])

    def gather_sparse(
        self, opts: CommunicationOptions, values: Any, indices: Any, _: Any = None
    ) -> Planned:
        """The plan of an ``all_gather_sparse`` of ``(values, indices)`` rows, and their count.

        Raises:
          ValueError: if ``values`` and ``indices`` have different numbers of rows.
          InvalidArgumentError: for a dtype MPI cannot move.
        """
        backend = self.backend(values)
        self.backend(indices)
        if values.ndim < 1 or indices.ndim != 1 or values.shape[0] != indices.shape[0]:
            raise refusable(
                ValueError(
                    f"all_gather_sparse on rank {self._rank}: values of shape {values.shape} "
                    f"and indices of shape {indices.shape} must have the same number of rows"
                )
            )
        check_one_kind("all_gather_sparse", self._rank, [values, indices])
        key = ("sparse", values.dtype, values.shape[1:], indices.dtype, backend)
        plan = self._gathers.get(key)
        if plan is None:
            gatherable(values.dtype, "all_gather_sparse")
            gatherable(indices.dtype, "all_gather_sparse")
            items = ((values.dtype.name, (ANY, *values.shape[1:])), (indices.dtype.name, (ANY,)))
            layout = Layout("all_gather_sparse", "", items, device_extra(backend))
            plan = _remember(self._gathers, key, GatherPlan(layout, digest(layout), 0, backend))
        if backend.device is not None:
            check_device("all_gather_sparse", self._rank, backend.device, (values, indices))
        return plan, int(values.shape[0])

    def broadcast(
        self, opts: CommunicationOptions, array: Any, root: int, _: Any = None
    ) -> Planned:
        """The plan of a broadcast of ``array`` from ``root``.

        Raises:
          ValueError: if ``root`` is not a rank of this communicator.
        """
        backend = self.backend(array)
        if type(root) is not int or not 0 <= root < self._size:
            raise refusable(
                ValueError(
                    f"broadcast: root {root!r} is not a rank of communicator {self._name} "
                    f"(ranks 0 to {self._size - 1})"
                )
            )
        key = (root, array.dtype, array.shape, backend)
        plan = self._broadcasts.get(key)
        if plan is None:
            gatherable(array.dtype, "broadcast")
            extra = (("root", root), *device_extra(backend))
            layout = Layout("broadcast", "", ((array.dtype.name, array.shape),), extra)
            plan = _remember(self._broadcasts, key, LayoutPlan(layout, digest(layout), backend))
        if backend.device is not None:
            check_device("broadcast", self._rank, backend.device, (array,))
        return plan, 0

    def barrier(self, opts: CommunicationOptions, *_: Any) -> Planned:
        """The plan of a barrier: its agreement is the synchronisation."""
        return BARRIER, 0

    def min_max(
        self, opts: CommunicationOptions, value: int, purpose: str, _: Any = None
    ) -> Planned:
        """The plan of a value agreement for ``purpose``, and ``value``.

        Raises:
          ValueError: if ``value`` is not an integer below 2**62 in magnitude.
          TypeError: if ``purpose`` is not a string.
        """
        if not isinstance(value, int | np.integer) or not -VALUE_LIMIT < value < VALUE_LIMIT:
            raise refusable(
                ValueError(f"min_max: {value!r} is not an integer below 2**62 in magnitude")
            )
        plan = self._agreements.get(purpose) if type(purpose) is str else None
        if plan is None:
            if not isinstance(purpose, str):
                raise refusable(TypeError(f"min_max: purpose must be a string, got {purpose!r}"))
            layout = Layout("min_max", "", (), (("purpose", purpose),))
            plan = _remember(self._agreements, purpose, LayoutPlan(layout, digest(layout)))
        return plan, int(value)


def _batch_key(
    op: Op | str, arrays: Sequence[Any], bytes_per_pack: int, det: bool, backend: Any
) -> Any:
    dtypes, shapes = tuple([a.dtype for a in arrays]), tuple([a.shape for a in arrays])
    return (op, bytes_per_pack, det, dtypes, shapes, backend)


def _exact_plan(dtype: Any, count: int, total_addends: int) -> ExactSum:
    """The exact sum of ``count`` elements of ``dtype`` (complex: twice as many reals)."""
    return ExactSum(real_dtype(dtype), count * (2 if dtype.kind == "c" else 1), total_addends)
