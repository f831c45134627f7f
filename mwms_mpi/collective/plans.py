"""What a communicator works out once per layout: its digest, its buffers, its packing.

A call whose layout this rank has seen costs a dict lookup here instead of hashing the layout,
validating dtypes and planning packs again. The caches are local and change nothing about
which MPI calls a rank makes: every call is still agreed (``agreement.py``), so a rank whose
cache differs from its peers' cannot make a different collective unnoticed. Eviction is FIFO,
by count (:data:`MAX_PLANS` per kind): LRU order would cost a dict update on every hit of the
hot path, and an evicted layout is only planned again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi.collective import packing
from mwms_mpi.collective.dtypes import gatherable, native, normalize_axis, wire_dtype
from mwms_mpi.collective.exact import ExactSum, real_dtype
from mwms_mpi.collective.exact import supports as exact_supports
from mwms_mpi.collective.ops import Op, as_op
from mwms_mpi.collective.pool import BufferPool, Source
from mwms_mpi.collective.signature import ANY, Layout, digest

MAX_PLANS = 1024  # per kind; the oldest is evicted first (FIFO: a hit stays one dict lookup)


def device_extra(backend: Any) -> tuple[tuple[str, object], ...]:
    """What a layout says about its arrays' kind and transport: nothing for host arrays, else
    ``arrays=cupy`` and the agreed transport (so that ranks passing numpy where others pass
    CuPy, or moving them differently, disagree instead of making different MPI calls)."""
    if backend.name == "host":
        return ()
    return (("arrays", _arrays.DEVICE), ("transport", backend.name))


def check_one_kind(op_name: str, rank: int, arrays: Sequence[Any]) -> None:
    """Raises if host and device arrays are mixed in one call on this rank.

    Raises:
      InvalidArgumentError: naming the first array of each kind.
    """
    if not arrays or _arrays.cupy_if_imported() is None:  # no CuPy: every array is numpy
        return
    first = _arrays.kind(arrays[0])
    for i, a in enumerate(arrays):
        other = _arrays.kind(a)
        if other != first:
            raise errors.InvalidArgumentError(
                None,
                op_name,
                f"{op_name} on rank {rank}: host and device arrays mixed in one call (array 0 "
                f"is {first}, array {i} is {other}); pass all on the host or all on the GPU",
                rank=rank,
            )


def check_out(out: Any, array: Any, backend: Any, rank: int) -> None:
    """Raises unless ``out`` can take the all-reduce of ``array`` (``Communicator.all_reduce``'s
    ``out``): an array of ``array``'s kind, shape and native dtype, writable and C-contiguous,
    that is ``array`` itself or shares no memory with it (MPI refuses aliased buffers, and a
    partly overlapping input would be overwritten while it is read).

    Raises:
      ValueError: naming what is wrong with ``out`` on this rank.
    """
    if out is array:
        if not backend.is_sendable(out) or not out.flags.writeable:
            raise ValueError(
                f"all_reduce on rank {rank}: out=array reduces in place, which needs a "
                "writable C-contiguous array of native byte order"
            )
        return
    if type(out) is not type(array) or not backend.supports(out):
        raise ValueError(
            f"all_reduce on rank {rank}: out must be an array of the input's kind "
            f"({type(array).__name__}), got {type(out).__name__}"
        )
    want = native(array.dtype)
    if out.shape != array.shape or out.dtype != want:
        raise ValueError(
            f"all_reduce on rank {rank}: out is {out.dtype}{list(out.shape)}, the result is "
            f"{want}{list(array.shape)}"
        )
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"all_reduce on rank {rank}: out must be writable and C-contiguous")
    if backend.xp.shares_memory(out, array):
        raise ValueError(
            f"all_reduce on rank {rank}: out shares memory with the input; pass out=array to "
            "reduce in place, or a separate buffer"
        )


class ReducePlan(NamedTuple):
    """An all-reduce layout: the op, what is agreed, and where its results come from."""

    op: Op
    layout: Layout
    digest: int
    results: Source
    as_bytes: bool  # bool arrays travel as uint8 (MPI has no MAX/MIN for C bool)
    exact: ExactSum | None  # a float SUM while op determinism is on: exact-then-rounded


class BatchPlan(NamedTuple):
    """A batch all-reduce layout: the op, what is agreed, and TF's packing of its arrays."""

    op: Op
    layout: Layout
    digest: int
    chunks: tuple[packing.Chunk, ...]
    groups: tuple[tuple[tuple[int, ...], ExactSum | None], ...] | None  # deterministic: by dtype


class GatherPlan(NamedTuple):
    """A gather layout (the gathered axis free), its digest and the normalised axis."""

    layout: Layout
    digest: int
    axis: int


class LayoutPlan(NamedTuple):
    """A layout and its digest (broadcasts, value agreements)."""

    layout: Layout
    digest: int


def _remember(cache: dict[Any, Any], key: Any, plan: Any) -> Any:
    if len(cache) >= MAX_PLANS:
        del cache[next(iter(cache))]
    cache[key] = plan
    return plan


class Plans:
    """The plans of one communicator, by layout.

    Args:
      rank: the communicator's rank, for error messages.
      size: the communicator's size (every rank contributes addends to a SUM).
      pool: the communicator's buffer pool (where all-reduce results come from).
    """

    def __init__(self, rank: int, size: int, pool: BufferPool) -> None:
        self._rank = rank
        self._size = size
        self._pool = pool
        self.reduces: dict[Any, ReducePlan] = {}  # (op, dtype, shape) -> plan; hot: read directly
        self._addends: dict[Any, ReducePlan] = {}
        self._batches: dict[Any, BatchPlan] = {}
        self._broadcasts: dict[Any, LayoutPlan] = {}
        self._gathers: dict[Any, GatherPlan] = {}
        self._agreements: dict[str, LayoutPlan] = {}

    def new_reduce(
        self, op: Op | str, array: Any, deterministic: bool, backend: Any, out: bool = False
    ) -> ReducePlan:
        """Validates and plans an all-reduce layout not seen before (for ``backend``'s arrays;
        ``out``: into the caller's buffer, which the layout says, as it says every argument).

        Raises:
          InvalidArgumentError: if the dtype cannot be reduced with ``op``.
          ValueError: for an unknown op name.
        """
        plan = self._reduce_plan(op, array.dtype, array.shape, 1, deterministic, backend)
        if out:
            layout = plan.layout._replace(extra=(*plan.layout.extra, ("out", True)))
            plan = plan._replace(layout=layout, digest=digest(layout))
        key = (op, array.dtype, array.shape, deterministic, backend, out)
        return _remember(self.reduces, key, plan)

    def addends(
        self,
        op: Op | str,
        addends: Sequence[Any],
        deterministic: bool,
        divisor: int,
        backend: Any,
    ) -> ReducePlan:
        """The plan of an all-reduce of a rank's local ``addends`` (all of one layout).

        Raises:
          InvalidArgumentError: if the addends' shapes or dtypes differ, or as ``new_reduce``.
          ValueError: for a ``divisor`` other than 1 on anything but a float SUM.
        """
        check_one_kind("all_reduce", self._rank, addends)
        first = addends[0]
        for i, a in enumerate(addends[1:], 1):
            if a.dtype != first.dtype or a.shape != first.shape:
                raise errors.InvalidArgumentError(
                    None,
                    "all_reduce",
                    f"all_reduce on rank {self._rank}: local replicas passed different values "
                    f"to reduce: {a.dtype}{list(a.shape)} on replica {i} != "
                    f"{first.dtype}{list(first.shape)} on replica 0",
                )
        key = (op, first.dtype, first.shape, len(addends), deterministic, divisor, backend)
        plan = self._addends.get(key)
        if plan is None:
            local = len(addends)
            plan = self._reduce_plan(op, first.dtype, first.shape, local, deterministic, backend)
            if divisor != 1:
                if plan.op is not Op.SUM or first.dtype.kind not in "fc":
                    raise ValueError(
                        f"all_reduce_addends: divisor={divisor!r} divides a float SUM only, "
                        f"not a {plan.op.value} of {first.dtype}"
                    )
                layout = plan.layout._replace(extra=(*plan.layout.extra, ("divisor", divisor)))
                plan = plan._replace(layout=layout, digest=digest(layout))
            plan = _remember(self._addends, key, plan)
        return plan

    def _reduce_plan(
        self,
        op: Op | str,
        dtype: Any,
        shape: tuple[int, ...],
        local: int,
        deterministic: bool,
        backend: Any,
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
        results = self._pool.source(shape, native(dtype), backend.empty, backend.name)
        return ReducePlan(checked, layout, digest(layout), results, dtype.kind == "b", exact)

    def batch(
        self,
        op: Op | str,
        arrays: Sequence[Any],
        bytes_per_pack: int,
        deterministic: bool,
        backend: Any,
    ) -> BatchPlan | None:
        """The plan of a batch all-reduce of ``arrays``, if this layout was seen."""
        return self._batches.get(_batch_key(op, arrays, bytes_per_pack, deterministic, backend))

    def new_batch(
        self,
        op: Op | str,
        arrays: Sequence[Any],
        bytes_per_pack: int,
        backend_of: Callable[[Any], Any],
        deterministic: bool,
    ) -> BatchPlan:
        """Validates and plans a batch layout not seen before (TF's packs, one chunk per dtype;
        a deterministic SUM: one group per dtype, exact for floats, ``bytes_per_pack`` unused).

        Raises:
          InvalidArgumentError: if host and device arrays are mixed, or a dtype cannot be
            reduced with ``op``.
          TypeError: if no backend supports an array.
        """
        check_one_kind("batch_all_reduce", self._rank, arrays)
        backend = backend_of(arrays[0]) if arrays else None
        for a in arrays[1:]:
            backend_of(a)  # an unsupported type raises
        checked = as_op(op)
        wires = [wire_dtype(a.dtype, checked, "batch_all_reduce", self._rank) for a in arrays]
        extra: list[tuple[str, object]] = [("bytes_per_pack", bytes_per_pack)]
        groups = None
        if deterministic and checked is Op.SUM:
            groups = self._exact_groups(arrays)
            extra.append(("deterministic", True))
        if backend is not None:
            extra.extend(device_extra(backend))
        chunks = packing.plan_batch(wires, [a.shape for a in arrays], bytes_per_pack)
        items = tuple((a.dtype.name, a.shape) for a in arrays)
        layout = Layout("batch_all_reduce", checked.value, items, tuple(extra))
        plan = BatchPlan(checked, layout, digest(layout), chunks, groups)
        key = _batch_key(op, arrays, bytes_per_pack, deterministic, backend)
        return _remember(self._batches, key, plan)

    def _exact_groups(
        self, arrays: Sequence[Any]
    ) -> tuple[tuple[tuple[int, ...], ExactSum | None], ...]:
        """The arrays' positions by dtype, in order of first appearance, each with its plan."""
        by_dtype: dict[Any, list[int]] = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault(native(a.dtype), []).append(i)
        groups = []
        for dtype, positions in by_dtype.items():
            count = sum(int(np.prod(arrays[i].shape, dtype=np.int64)) for i in positions)
            plan = _exact_plan(dtype, count, self._size) if exact_supports(dtype) else None
            groups.append((tuple(positions), plan))
        return tuple(groups)

    def gather(self, array: Any, axis: int, backend: Any) -> GatherPlan:
        """The plan of an ``all_gather`` of ``array`` along ``axis`` (made on first use).

        Raises:
          ValueError: for a 0-d array or an axis out of range.
          InvalidArgumentError: for a dtype MPI cannot move.
        """
        key = ("dense", array.dtype, array.shape, axis, backend)
        plan = self._gathers.get(key)
        if plan is None:
            axis = normalize_axis(array, axis, "all_gather")
            gatherable(array.dtype, "all_gather")
            rest = array.shape[:axis] + array.shape[axis + 1 :]
            extra = (("axis", axis), *device_extra(backend))
            layout = Layout("all_gather", "", ((array.dtype.name, (ANY, *rest)),), extra)
            plan = _remember(self._gathers, key, GatherPlan(layout, digest(layout), axis))
        return plan

    def gather_sparse(self, values: Any, indices: Any, backend: Any) -> GatherPlan:
        """The plan of an ``all_gather_sparse`` of ``(values, indices)`` rows.

        Raises:
          ValueError: if ``values`` and ``indices`` have different numbers of rows.
          InvalidArgumentError: for a dtype MPI cannot move.
        """
        if values.ndim < 1 or indices.ndim != 1 or values.shape[0] != indices.shape[0]:
            raise ValueError(
                f"all_gather_sparse on rank {self._rank}: values of shape {values.shape} and "
                f"indices of shape {indices.shape} must have the same number of rows"
            )
        check_one_kind("all_gather_sparse", self._rank, [values, indices])
        key = ("sparse", values.dtype, values.shape[1:], indices.dtype, backend)
        plan = self._gathers.get(key)
        if plan is None:
            gatherable(values.dtype, "all_gather_sparse")
            gatherable(indices.dtype, "all_gather_sparse")
            items = ((values.dtype.name, (ANY, *values.shape[1:])), (indices.dtype.name, (ANY,)))
            layout = Layout("all_gather_sparse", "", items, device_extra(backend))
            plan = _remember(self._gathers, key, GatherPlan(layout, digest(layout), 0))
        return plan

    def broadcast(self, array: Any, root: int, backend: Any) -> LayoutPlan:
        """The plan of a broadcast of ``array`` from ``root`` (made on first use)."""
        key = (root, array.dtype, array.shape, backend)
        plan = self._broadcasts.get(key)
        if plan is None:
            extra = (("root", root), *device_extra(backend))
            layout = Layout("broadcast", "", ((array.dtype.name, array.shape),), extra)
            plan = _remember(self._broadcasts, key, LayoutPlan(layout, digest(layout)))
        return plan

    def agreement(self, purpose: str) -> LayoutPlan:
        """The plan of a value agreement (``min_max``) for ``purpose`` (made on first use)."""
        plan = self._agreements.get(purpose)
        if plan is None:
            if not isinstance(purpose, str):
                raise TypeError(f"min_max: purpose must be a string, got {purpose!r}")
            layout = Layout("min_max", "", (), (("purpose", purpose),))
            plan = _remember(self._agreements, purpose, LayoutPlan(layout, digest(layout)))
        return plan


def _batch_key(
    op: Op | str, arrays: Sequence[Any], bytes_per_pack: int, det: bool, backend: Any
) -> Any:
    dtypes, shapes = tuple([a.dtype for a in arrays]), tuple([a.shape for a in arrays])
    return (op, bytes_per_pack, det, dtypes, shapes, backend)


def _exact_plan(dtype: Any, count: int, total_addends: int) -> ExactSum:
    """The exact sum of ``count`` elements of ``dtype`` (complex: twice as many reals)."""
    return ExactSum(real_dtype(dtype), count * (2 if dtype.kind == "c" else 1), total_addends)
