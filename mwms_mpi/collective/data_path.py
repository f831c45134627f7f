"""The data step of every collective: moving the bytes once every rank has agreed the call.

Each public method is one collective's data step in the call template (``protocol.py``): it gets
the agreed plan (``plans.py``), the agreed (minimum, maximum) of the ranks' values and the
collective's arguments, starts its MPI (or NCCL) calls on the data communicator in the form the
call's deadline asks for (blocking without one), and hands what it started to the template's
``wait``. Results are new arrays the library never writes again (docs/architecture.md, "Results
are values"): from the plan's source or the pool, never the caller's input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi._arrays import native_dtype
from mwms_mpi.collective import packing
from mwms_mpi.collective.backends import CollectiveBackend
from mwms_mpi.collective.deterministic import exact_batch, exact_sum
from mwms_mpi.collective.dtypes import contiguous
from mwms_mpi.collective.exact import ExactSum
from mwms_mpi.collective.ops import COMBINE_NAMES, Op
from mwms_mpi.collective.plans import BatchPlan, GatherPlan, LayoutPlan, ReducePlan
from mwms_mpi.collective.pool import BufferPool
from mwms_mpi.collective.protocol import CallProtocol

Agreed = tuple[int, int]  # the ranks' values' (minimum, maximum)


class DataPath:
    """The data steps of one communicator's collectives.

    Args:
      data: the communicator's data MPI communicator (duplicated, carrying nothing else).
      calls: the communicator's call protocol (the deadline of the call in flight, ``wait``).
      pool: where results and scratch buffers come from.
      host: the host (numpy) backend, for the exact sums' in-place reductions.
    """

    def __init__(
        self, data: Any, calls: CallProtocol, pool: BufferPool, host: CollectiveBackend
    ) -> None:
        self._data = data
        self._calls = calls
        self._pool = pool
        self._host = host

    # -- reductions --------------------------------------------------------------------------

    def all_reduce(self, plan: ReducePlan, agreed: Agreed, array: Any, op: Any, out: Any) -> Any:
        """``array`` reduced into a new result, or into ``out`` (``out=array``: in place)."""
        if plan.exact is not None:
            return self._exact_sum(plan.exact, [array], 1, out)
        backend = plan.backend
        recv = plan.results() if out is None else out
        if recv is array:
            send = None  # the caller asked for the reduction in place
        elif backend.is_sendable(array):
            send = array
        else:  # one copy, into the result, which is then reduced in place
            backend.xp.copyto(recv, array)
            send = None
        if plan.as_bytes or not recv.size:
            self._reduce_into(plan, send, recv)
            return recv
        # _reduce_into's common case, one frame less: the 4 KB call's Python is its cost
        calls = self._calls
        request = backend.all_reduce(self._data, send, recv, plan.op, calls.deadline is None)
        if request is not None:
            calls.wait([request], (send, recv))
        return recv

    def all_reduce_addends(
        self, plan: ReducePlan, agreed: Agreed, addends: Sequence[Any], op: Any, divisor: int
    ) -> Any:
        """This rank's addends combined into one result buffer, then reduced in place; a
        MEAN's ``divisor`` divides it (inside the exact sum with op determinism on)."""
        if plan.exact is not None:
            return self._exact_sum(plan.exact, addends, divisor, None)
        xp = plan.backend.xp
        recv = plan.results()
        combine = getattr(xp, COMBINE_NAMES[plan.op])
        if _arrays.is_device_array(recv):  # replicas on other GPUs: copies ordered after them
            addends = [_arrays.like(a, recv) for a in addends]
        if len(addends) == 1:
            xp.copyto(recv, addends[0])
        else:
            combine(addends[0], addends[1], out=recv)
        for a in addends[2:]:
            combine(recv, a, out=recv)
        self._reduce_into(plan, None, recv)
        if divisor != 1:
            xp.true_divide(recv, divisor, out=recv)
        return recv

    def batch_all_reduce(
        self, plan: BatchPlan, agreed: Agreed, arrays: Sequence[Any], op: Any, divisor: int
    ) -> list[Any]:
        """One MPI call per pack of the plan (TF's packing); exact sums per dtype with op
        determinism on. Results in the caller's order, shapes and dtypes."""
        if plan.groups is not None:
            host = [_arrays.to_host(a) for a in arrays]  # exact sums: numpy, on the host
            sums = exact_batch(plan.groups, host, self._in_place, self._pool, divisor)
            return [_arrays.like(r, a) for r, a in zip(sums, arrays, strict=True)]
        backend = plan.backend
        pool = self._pool

        def take(shape: tuple[int, ...], dtype: Any) -> Any:
            return pool.take(shape, dtype, backend.empty, backend.name)

        blocking = self._calls.deadline is None
        out, requests = packing.reduce_chunks(
            plan.chunks, arrays, plan.op, backend, self._data, take, blocking
        )
        self._calls.wait(requests, (arrays, out))
        for i, a in enumerate(arrays):
            if out[i] is None:  # no elements: nothing was sent
                out[i] = backend.empty(a.shape, native_dtype(a.dtype))
            elif a.dtype.kind == "b":
                out[i] = out[i].view(np.bool_)
            elif divisor != 1:
                backend.xp.true_divide(out[i], divisor, out=out[i])
        return out

    def _reduce_into(self, plan: ReducePlan, send: Any, recv: Any) -> None:
        """``send`` (or ``recv`` in place) all-reduced into ``recv`` (bool travels as bytes:
        MPI has no MAX/MIN for C bool)."""
        if not recv.size:
            return
        wire = recv
        if plan.as_bytes:
            wire = recv.view(np.uint8)
            send = None if send is None else send.view(np.uint8)
        calls = self._calls
        request = plan.backend.all_reduce(self._data, send, wire, plan.op, calls.deadline is None)
        if request is not None:  # in flight: completed under the call's deadline
            calls.wait([request], (send, recv))

    def _exact_sum(self, plan: ExactSum, addends: Sequence[Any], divisor: int, out: Any) -> Any:
        """An agreed deterministic SUM: exact sums are numpy, so device addends are staged
        through the host and the result goes back to their device (the same bits as numpy);
        into ``out`` when the caller gave it (a device ``out`` takes one copy)."""
        host = [_arrays.to_host(a) for a in addends]
        host_out = None if _arrays.is_device_array(out) else out
        result = exact_sum(plan, host, self._in_place, self._pool, divisor, host_out)
        if out is None:
            return _arrays.like(result, addends[0])
        if result is not out:  # a device out: one copy from the host, straight into it
            out.set(result)
        return out

    def _in_place(self, buffer: Any, op: Op) -> None:
        """An in-place all-reduce of a host buffer on the data communicator (an exact sum's
        steps), under the call's deadline."""
        if not buffer.size:
            return
        calls = self._calls
        request = self._host.all_reduce(self._data, None, buffer, op, calls.deadline is None)
        calls.wait([request], buffer)

    # -- gathers and broadcasts --------------------------------------------------------------

    def all_gather(
        self, plan: GatherPlan, agreed: Agreed, array: Any, axis: int, _: Any = None
    ) -> Any:
        """Every rank's rows along the plan's axis, in rank order."""
        backend = plan.backend
        xp = backend.xp
        axis = plan.axis
        send = contiguous(backend, array if axis == 0 else xp.moveaxis(array, axis, 0))
        (recv,) = self._gather_rows(plan, agreed, [send])
        return recv if axis == 0 else xp.ascontiguousarray(xp.moveaxis(recv, 0, axis))

    def all_gather_sparse(
        self, plan: GatherPlan, agreed: Agreed, values: Any, indices: Any, _: Any = None
    ) -> tuple[Any, Any]:
        """Every rank's ``(values, indices)`` rows, in rank order."""
        backend = plan.backend
        parts = [contiguous(backend, values), contiguous(backend, indices)]
        gathered = self._gather_rows(plan, agreed, parts)
        return gathered[0], gathered[1]

    def _gather_rows(self, plan: GatherPlan, agreed: Agreed, parts: Sequence[Any]) -> list[Any]:
        """Contiguous ``parts`` (this rank's rows each) gathered along axis 0.

        The agreement carried this rank's row count: when every rank has as many (the agreed
        minimum equals the maximum) nothing more is exchanged; otherwise the counts follow on
        the agreement communicator, then one ``Allgatherv`` per part moves the data.
        """
        calls = self._calls
        blocking = calls.deadline is None
        rows = int(parts[0].shape[0])
        least, most = agreed
        if least == most:
            counts = [rows] * calls.size
        else:
            request, buffers = calls.agreement.exchange_counts(rows, blocking)
            calls.wait([request], buffers)
            counts = [int(r) for r in buffers[1]]
        backend = plan.backend
        pool = self._pool
        total = sum(counts)
        empty, kind = backend.empty, backend.name
        out = [pool.take((total, *p.shape[1:]), p.dtype, empty, kind) for p in parts]
        if total:
            requests = []
            for part, recv in zip(parts, out, strict=True):
                row_size = int(np.prod(part.shape[1:], dtype=np.int64))
                sizes = [r * row_size for r in counts]
                requests.append(backend.all_gatherv(self._data, part, recv, sizes, blocking))
            calls.wait(requests, (parts, out))
        return out

    def broadcast(
        self, plan: LayoutPlan, agreed: Agreed, array: Any, root: int, _: Any = None
    ) -> Any:
        """A new array holding ``root``'s ``array``."""
        backend = plan.backend
        assert backend is not None
        buf = self._pool.take(array.shape, native_dtype(array.dtype), backend.empty, backend.name)
        if self._calls.rank == root:
            backend.xp.copyto(buf, array)
        if buf.size:
            request = backend.broadcast(self._data, buf, root, self._calls.deadline is None)
            self._calls.wait([request], buf)
        return buf

    # -- agreements only ---------------------------------------------------------------------

    @staticmethod
    def nothing(plan: LayoutPlan, agreed: Agreed, *_: Any) -> None:
        """A barrier's data step: the agreement was the synchronisation."""

    @staticmethod
    def agreed(plan: LayoutPlan, agreed: Agreed, value: int, purpose: str, _: Any = None) -> Agreed:
        """``min_max``'s data step: the agreed (minimum, maximum) is the result."""
        return agreed
