"""Thread-per-replica execution of ``fn`` with TF's ``merge_call`` rendezvous (mirrored_run).

As in TF, the calling thread drives the replica threads one at a time: each runs until it
finishes or reaches ``merge_call``; when every replica has paused in ``merge_call`` the merge
function runs once, in the calling thread, in cross-replica context, and each replica gets its
part of the result. Only one thread runs at a time, and every collective is issued by the
calling thread (the one that owns the communicator). If some replicas finish while others wait
in ``merge_call``, ``RuntimeError`` is raised; an exception in any replica or merge function
stops every replica thread and is re-raised in the caller. With ``MWMS_MPI_CHECK=callsite`` the
first replica's source line at its ``merge_call`` is the call site of what the merge function
agrees (the calling thread's own stack only shows ``strategy.run``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from mwms_mpi import _context, _name_scope
from mwms_mpi.collective import call_context
from mwms_mpi.distribute.replica_context import ReplicaContext
from mwms_mpi.values import regroup, select_replica

if TYPE_CHECKING:
    from mwms_mpi.distribute._types import StrategyProtocol


class _RequestedStop(Exception):
    """Raised inside a paused replica thread to unwind it when the run is abandoned."""


class _Coordinator:
    """Remembers the first exception and tells paused replica threads to stop."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None
        self._lock = threading.Lock()

    def should_stop(self) -> bool:
        return self.exception is not None

    def request_stop(self, exc: BaseException) -> None:
        with self._lock:
            if self.exception is None:
                self.exception = exc


class _ReplicaThread(threading.Thread):
    """Runs ``fn`` for one local replica, pausing at each ``merge_call``."""

    def __init__(
        self,
        context: MirroredReplicaContext,
        coord: _Coordinator,
        fn: Callable[..., Any],
        args: Any,
        kwargs: Any,
        device: AbstractContextManager[Any],
    ) -> None:
        super().__init__(name=f"replica-{context._replica_id}", daemon=True)
        self.context = context
        self.device = device  # the replica's GPU made current in its thread (CuPy's is per thread)
        self.coord = coord
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.should_run = threading.Event()
        self.has_paused = threading.Event()
        self.done = False
        self.main_result: Any = None
        self.merge_fn: Callable[..., Any] | None = None
        self.merge_args: Any = ()
        self.merge_kwargs: Any = {}
        self.merge_site: str | None = None  # the user's line at merge_call (callsite mode)
        self.merge_result: Any = None

    def run(self) -> None:
        self.should_run.wait()
        self.should_run.clear()
        try:
            if self.coord.should_stop():
                return
            self.context._thread = self
            with self.device, self.context:
                self.main_result = self.fn(*self.args, **self.kwargs)
            self.done = True
        except _RequestedStop:
            pass
        except BaseException as exc:  # handed to the caller of run()
            self.coord.request_stop(exc)
        finally:
            self.has_paused.set()


class MirroredReplicaContext(ReplicaContext):
    """ReplicaContext for a replica run in its own thread: ``merge_call`` pauses it."""

    _thread: _ReplicaThread | None = None

    @property
    def devices(self) -> Any:
        """TF's ``_MirroredReplicaContext.devices``: ``[worker_devices_by_replica[i]]``, a list
        holding this replica's list of devices, ``i`` the replica's id in the sync group.

        TF indexes this worker's list with the global id, so on a MultiWorkerMirroredStrategy
        worker past the first it raises ``IndexError`` (kept: docs/architecture.md, "Deliberate
        differences", TF's own failures).
        """
        _context.require_replica_context(self)
        by_replica: list[list[str]] = self._strategy.extended.worker_devices_by_replica  # type: ignore[attr-defined]
        if self._replica_id >= len(by_replica):  # TF's class; its bare message explained
            raise IndexError(
                "list index out of range: ReplicaContext.devices indexes this worker's "
                f"{len(by_replica)} replica device list(s) with the global replica id "
                f"{self._replica_id}, as TF 2.21 does (it fails on every worker but the first)"
            )
        return [by_replica[self._replica_id]]

    def _merge_call(self, merge_fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        t = self._thread
        if t is None or threading.current_thread() is not t:  # one local replica: no thread
            # TF runs it in a replica thread too, which hands back select_replica(0, result),
            # and the merge function in the caller's name scope (_name_scope.merge_scope)
            with _name_scope.merge_scope():
                return select_replica(0, super()._merge_call(merge_fn, args, kwargs))
        if t.coord.should_stop():  # told to stop already: nobody would resume this replica
            raise _RequestedStop()
        t.merge_fn, t.merge_args, t.merge_kwargs = merge_fn, args, kwargs
        t.merge_site = call_context.user_site() if call_context.recording_sites() else None
        t.has_paused.set()
        t.should_run.wait()
        t.should_run.clear()
        if t.coord.should_stop():
            raise _RequestedStop()
        return t.merge_result


def call_for_each_replica(
    strategy: StrategyProtocol,
    contexts: tuple[ReplicaContext, ...],
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
    device: Callable[[int], AbstractContextManager[Any]] | None = None,
) -> Any:
    """Calls ``fn`` once per local replica and regroups the results.

    With one local replica ``fn`` runs in the calling thread; with more, one thread per replica
    as described in the module docstring.

    Args:
      strategy: the strategy whose replicas run ``fn``.
      contexts: one replica context per local replica, made for this call.
      fn: the replica function.
      args: positional arguments; ``PerReplica`` values are unwrapped per replica.
      kwargs: keyword arguments, likewise.
      device: replica i's device scope (its GPU made current in its thread), or ``None``.

    Returns:
      The regrouped results: ``PerReplica`` leaves for several replicas; for one, the values
      themselves (a component variable: its distributed variable).

    Raises:
      RuntimeError: if replicas called ``merge_call`` a different number of times.
      Exception: whatever ``fn`` or a merge function raised.
    """
    if len(contexts) == 1:
        # the name scopes TF's replica thread would have (the root; merge functions get the
        # caller's back): _name_scope.replica_root
        with contexts[0], _name_scope.replica_root():
            result = fn(*select_replica(0, args), **select_replica(0, kwargs))
        # regrouped as TF regroups one replica's results: a component variable comes back as
        # its distributed variable (value_container), everything else as it is
        return regroup((result,))
    coord = _Coordinator()
    threads = [
        _ReplicaThread(
            ctx,  # type: ignore[arg-type]
            coord,
            fn,
            select_replica(i, args),
            select_replica(i, kwargs),
            nullcontext() if device is None else device(i),
        )
        for i, ctx in enumerate(contexts)
    ]
    for t in threads:
        t.start()
    merge_entry = _context.ContextEntry(strategy, strategy, None)
    try:
        while True:
            done = []
            for t in threads:
                t.should_run.set()
                t.has_paused.wait()
                t.has_paused.clear()
                if coord.should_stop():
                    break
                done.append(t.done)
            if coord.should_stop() or all(done):
                break
            if any(done):
                raise RuntimeError(
                    "Some replicas made a different number of replica_context().merge_call() calls."
                )
            merge_args = regroup(tuple(t.merge_args for t in threads))
            merge_kwargs = regroup(tuple(t.merge_kwargs for t in threads))
            merge_fn = threads[0].merge_fn
            if merge_fn is None:  # every paused thread has set it
                raise RuntimeError("A replica paused without a merge_call function.")
            try:
                with _context.scope(merge_entry), call_context.merge_site(threads[0].merge_site):
                    merge_result = merge_fn(strategy, *merge_args, **merge_kwargs)
            except BaseException as exc:
                coord.request_stop(exc)
                break
            for r, t in enumerate(threads):
                t.merge_result = select_replica(r, merge_result)
    except BaseException as exc:
        coord.request_stop(exc)
    finally:
        for t in threads:
            t.should_run.set()
        for t in threads:
            t.join()
        for t in threads:
            t.context._thread = None
    if coord.exception is not None:
        raise coord.exception
    return regroup(tuple(t.main_result for t in threads))
