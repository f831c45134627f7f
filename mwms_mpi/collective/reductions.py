"""The all-reduce collectives of a communicator: one array, a rank's local addends, a batch.

:class:`Reductions` is the part of :class:`~mwms_mpi.collective.Communicator` that reduces
(the communicator adds construction, gathers, broadcasts and value agreements). Every method
numbers its call, agrees it with every rank (``calls.py``), then moves the data: the host MPI
call, a pack per dtype for a batch, or, with op determinism on, the exact sums of
``deterministic.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._config import switches
from mwms_mpi.collective import calls, packing
from mwms_mpi.collective.backends import CollectiveBackend, select
from mwms_mpi.collective.call_context import current as current_context
from mwms_mpi.collective.calls import CallState
from mwms_mpi.collective.deadline import Deadline
from mwms_mpi.collective.deterministic import exact_batch, exact_sum
from mwms_mpi.collective.dtypes import native
from mwms_mpi.collective.exact import ExactSum
from mwms_mpi.collective.ops import COMBINE_NAMES, Op
from mwms_mpi.collective.plans import Plans, ReducePlan, check_one_kind, check_out
from mwms_mpi.collective.pool import BufferPool
from mwms_mpi.collective.watch import watched
from mwms_mpi.types import CommunicationOptions

# Errors a rank may find in its own arguments before any data moves (then refused in agreement).
ARGUMENT_ERRORS = (ValueError, TypeError, AttributeError, errors.InvalidArgumentError)


class Reductions:
    """All-reduce collectives, over the communicator's call state, plans and data MPI comm."""

    # Set by the communicator's constructor.
    _state: CallState
    _data: Any
    _host: CollectiveBackend
    _backends: list[CollectiveBackend]
    _by_type: dict[type, CollectiveBackend]
    _pool: BufferPool
    _plans: Plans
    _reduce_plans: dict[Any, ReducePlan]
    _options: CommunicationOptions
    _mpi_error: tuple[type[Exception], ...]

    def all_reduce(
        self,
        array: Any,
        op: Op | str = Op.SUM,
        options: CommunicationOptions | None = None,
        out: Any = None,
    ) -> Any:
        """Reduces ``array`` element-wise over all ranks; every rank gets the same new array.

        The result is a new array that the library never writes again (docs/architecture.md,
        "Results are values"), unless the caller gives ``out``.

        Args:
          array: a numpy (or backend-supported) array of the same shape and dtype on every rank.
          op: ``Op.SUM``, ``Op.MAX`` or ``Op.MIN`` (or the name).
          options: merged over the communicator's default ``CommunicationOptions``.
          out: where to write the result instead (zero-copy): a writable C-contiguous array of
            ``array``'s kind, shape and native dtype, that is ``array`` itself (reduced in
            place) or shares no memory with it. Whether ``out`` is given is agreed like any
            other argument.

        Returns:
          The new result, or ``out``.

        Raises:
          InvalidArgumentError: if the ranks' calls differ, or the dtype cannot be reduced with
            ``op`` (bool only with MAX/MIN, complex only with SUM).
          ValueError: on every rank, if ``out`` is not as described on some rank.
          DeadlineExceededError: if ``timeout_seconds`` passed before all ranks joined.
          UnavailableError: if an earlier failure poisoned this communicator or a peer left.
        """
        state = self._state
        context = current_context()
        n = state.begin("all_reduce", context)
        try:  # not @watched: the hot path marks its end in `finally` itself, one frame less
            deadline = None if options is None and state.blocking else state.merged(options)
            try:
                backend = self._by_type.get(type(array)) or self._backend(array)
                det = switches.op_determinism
                given = out is not None
                key = (op, array.dtype, array.shape, det, backend, given)
                plan = self._reduce_plans.get(key)
                agree = state.agreement.every_call
                if plan is None:
                    plan, agree = self._plans.new_reduce(op, array, det, backend, given), True
                if given:
                    check_out(out, array, backend, state.rank)
            except ARGUMENT_ERRORS as exc:
                state.refuse("all_reduce", exc, deadline)
            if not agree:
                state.agreement.skip()
            elif deadline is None:
                state.agreement.agree_now("all_reduce", plan.digest, plan.layout, context)
            else:
                state.agree("all_reduce", plan.digest, plan.layout, deadline)
            if plan.exact is not None:
                return self._exact_sum(plan.exact, [array], deadline, n, out=out)
            recv = plan.results.take() if out is None else out
            if recv is array:
                send = None  # the caller asked for the reduction in place
            elif backend.is_sendable(array):
                send = array
            else:  # one copy, into the result, which is then reduced in place
                backend.xp.copyto(recv, array)
                send = None
            if deadline is not None or plan.as_bytes:
                self._reduce_into(backend, send, recv, plan, deadline, n)
            elif recv.size:
                backend.all_reduce(self._data, send, recv, plan.op, True)
            return recv
        except self._mpi_error as exc:
            raise self._state.internal("all_reduce", n, exc) from exc
        finally:
            state.busy = None

    @watched
    def all_reduce_addends(
        self,
        addends: Sequence[Any],
        op: Op | str = Op.SUM,
        options: CommunicationOptions | None = None,
        divisor: int = 1,
    ) -> Any:
        """Reduces this rank's ``addends`` together, then across ranks, in one result buffer.

        A worker's local replicas each hold one addend: they are combined (``op``) straight into
        the buffer that the collective then reduces in place, so reducing k addends costs one
        result buffer whatever k is. Every rank passes as many addends, of one shape and dtype.
        With op determinism on, a float SUM is the exact sum of every rank's addends, divided by
        ``divisor`` (a MEAN's replica count) before its one rounding.

        Raises:
          InvalidArgumentError: on every rank, if the addends' shapes or dtypes differ on any
            rank, or as :meth:`all_reduce`.
          ValueError: for a ``divisor`` other than 1 on anything but a float SUM.
        """
        addends = list(addends)
        if len(addends) == 1 and divisor == 1:
            return self.all_reduce(addends[0], op, options)
        n = self._state.begin("all_reduce")
        deadline = self._state.merged(options)
        try:
            backend = self._backend(addends[0] if addends else None)
            plan = self._plans.addends(op, addends, switches.op_determinism, divisor, backend)
        except ARGUMENT_ERRORS as exc:
            self._state.refuse("all_reduce", exc, deadline)
        try:
            self._state.agree("all_reduce", plan.digest, plan.layout, deadline)
            if plan.exact is not None:
                return self._exact_sum(plan.exact, addends, deadline, n, divisor)
            recv = plan.results.take()
            combine = getattr(backend.xp, COMBINE_NAMES[plan.op])
            if len(addends) == 1:
                backend.xp.copyto(recv, addends[0])
            else:
                combine(addends[0], addends[1], out=recv)
            for a in addends[2:]:
                combine(recv, a, out=recv)
            self._reduce_into(backend, None, recv, plan, deadline, n)
            if divisor != 1:
                backend.xp.true_divide(recv, divisor, out=recv)
            return recv
        except self._mpi_error as exc:
            raise self._state.internal("all_reduce", n, exc) from exc

    @watched
    def batch_all_reduce(
        self,
        arrays: Sequence[Any],
        op: Op | str = Op.SUM,
        options: CommunicationOptions | None = None,
        divisor: int = 1,
    ) -> list[Any]:
        """Reduces many arrays with one MPI call per pack (TF's ``group_by_size`` packing).

        Packs are filled in reversed order, as TF's CollectiveAllReduce does, with
        ``bytes_per_pack`` from the merged options (0: one pack); the arrays of a pack that share
        a dtype are flattened into one fresh buffer and reduced in place. Results come back in
        the caller's order, with the original shapes and dtypes. An empty list is agreed too.

        With op determinism on, the float arrays' sums are exact, one group per dtype, and a
        ``divisor`` (a MEAN's replica count) divides each exact sum before its one rounding.

        Raises:
          As :meth:`all_reduce`, naming the first array whose layout differs.
          ValueError: for a ``divisor`` other than 1 on anything but float SUMs.
        """
        n = self._state.begin("batch_all_reduce")
        opts = self._options.merge(options)
        deadline = calls.deadline(opts)
        try:
            arrays = list(arrays)
            check_one_kind("batch_all_reduce", self._state.rank, arrays)
            backend = self._backend(arrays[0]) if arrays else self._host
            det = switches.op_determinism
            plan = self._plans.batch(op, arrays, opts.bytes_per_pack, det, backend)
            agree = self._state.agreement.every_call
            if plan is None:
                plan = self._plans.new_batch(op, arrays, opts.bytes_per_pack, self._backend, det)
                agree = True
            if divisor != 1 and (
                plan.op is not Op.SUM or any(a.dtype.kind not in "fc" for a in arrays)
            ):
                raise ValueError(f"batch_all_reduce: divisor={divisor!r} divides float SUMs only")
        except ARGUMENT_ERRORS as exc:
            self._state.refuse("batch_all_reduce", exc, deadline)
        try:
            if agree:
                self._state.agree("batch_all_reduce", plan.digest, plan.layout, deadline)
            else:
                self._state.agreement.skip()
            if plan.groups is not None:
                in_place = self._in_place(deadline, n)
                host = [_arrays.to_host(a) for a in arrays]  # exact sums: numpy, on the host
                sums = exact_batch(plan.groups, host, in_place, self._pool, divisor)
                return [_arrays.like(r, a) for r, a in zip(sums, arrays, strict=True)]

            def take(shape: tuple[int, ...], dtype: Any) -> Any:
                return self._pool.take(shape, dtype, backend.empty, backend.name)

            out, requests = packing.reduce_chunks(
                plan.chunks, arrays, plan.op, backend, self._data, take, deadline is None
            )
            self._state.complete("batch_all_reduce", n, deadline, requests, (arrays, out))
            for i, a in enumerate(arrays):
                if out[i] is None:  # no elements: nothing was sent
                    out[i] = backend.empty(a.shape, native(a.dtype))
                elif a.dtype.kind == "b":
                    out[i] = out[i].view(np.bool_)
                elif divisor != 1:
                    backend.xp.true_divide(out[i], divisor, out=out[i])
            return out
        except self._mpi_error as exc:
            raise self._state.internal("batch_all_reduce", n, exc) from exc

    def _backend(self, array: Any) -> CollectiveBackend:
        kind = type(array)
        backend = self._by_type.get(kind)
        if backend is None:
            backend = self._by_type[kind] = select(self._backends, array)
        return backend

    def _exact_sum(
        self,
        plan: ExactSum,
        addends: Sequence[Any],
        deadline: Deadline | None,
        n: int,
        divisor: int = 1,
        out: Any = None,
    ) -> Any:
        """An agreed deterministic SUM: exact sums are numpy, so device addends are staged
        through the host and the result goes back to their device (the same bits as numpy);
        into ``out`` when the caller gave it (a device ``out`` takes one copy)."""
        host = [_arrays.to_host(a) for a in addends]
        host_out = None if _arrays.is_device_array(out) else out
        result = exact_sum(plan, host, self._in_place(deadline, n), self._pool, divisor, host_out)
        if out is None:
            return _arrays.like(result, addends[0])
        if result is not out:  # a device out: one copy from the host, straight into it
            out.set(result)
        return out

    def _in_place(self, deadline: Deadline | None, n: int) -> Callable[[Any, Op], None]:
        """An in-place all-reduce of host buffers on the data communicator, with the deadline."""

        def all_reduce(buffer: Any, op: Op) -> None:
            if not buffer.size:
                return
            request = self._host.all_reduce(self._data, None, buffer, op, deadline is None)
            self._state.complete("all_reduce", n, deadline, [request], buffer)

        return all_reduce

    def _reduce_into(
        self,
        backend: CollectiveBackend,
        send: Any,
        recv: Any,
        plan: ReducePlan,
        deadline: Deadline | None,
        n: int,
    ) -> None:
        """The data step of an agreed all-reduce: ``send`` (or ``recv`` in place) into ``recv``."""
        wire = recv
        if plan.as_bytes:  # MPI has no MAX/MIN for C bool: send bytes
            wire = recv.view(np.uint8)
            send = None if send is None else send.view(np.uint8)
        if recv.size:
            if deadline is None:
                backend.all_reduce(self._data, send, wire, plan.op, True)
            else:
                request = backend.all_reduce(self._data, send, wire, plan.op, False)
                self._state.complete("all_reduce", n, deadline, [request], (send, recv))
