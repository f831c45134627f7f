"""The process watch: one daemon thread that names stalls and ends waits on lost ranks.

Process-wide state lives in one object, :class:`ProcessWatch` (``process_watch()``), started by
the first communicator and shut down before ``MPI_Finalize``:

* **Stalls** (``stall.py``): a collective waiting longer than ``MWMS_MPI_STALL_WARNING`` is
  logged with its op, call number and rank.
* **Lost ranks** (``departures.py``): the first communicator over the whole world makes the
  control channel. The thread polls it (``Iprobe`` + sleep, 10 Hz; MPI's blocking receive
  would busy-poll) and records each departure on the communicators the departed rank belonged
  to. A call the departed rank never entered then fails: with ``UnavailableError`` on entry or
  while polling a deadline, or, when this rank is blocked in MPI, by aborting the job with a
  message that names the departed rank. Polling from a thread needs ``MPI_THREAD_MULTIPLE``;
  with less, the watch says so once and runs without it.
* **Leaving**: at interpreter exit (``atexit``, before mpi4py's ``MPI_Finalize``) or in an
  explicit ``MPI.Finalize()`` (a ``COMM_SELF`` attribute's delete callback), the thread is
  stopped and joined and this rank's notice is sent, unless every rank agreed to stop
  (``_lifecycle.agreed_exit``). A communicator poisoned by a timeout still has a collective in
  flight, with which MPI cannot finalize: the job is aborted instead, saying why.
* The first multi-rank communicator also makes an uncaught exception abort the job
  (``_lifecycle.abort_on_uncaught``; the hook itself is installed on import).
"""

from __future__ import annotations

import atexit
import functools
import logging
import sys
import threading
import time
from typing import Any

from mwms_mpi import _lifecycle
from mwms_mpi._mpi import mpi
from mwms_mpi.collective.departures import ControlChannel, Notice
from mwms_mpi.collective.stall import Busy, StallCheck, describe_call, seconds_from_env

__all__ = ["ProcessWatch", "process_watch"]

POLL_PERIOD_S = 0.1
# A waiter that polls a deadline raises by itself within milliseconds; one blocked in MPI is
# still busy after this long, and the job is aborted.
BLOCKED_GRACE_S = 0.5

_log = logging.getLogger("mwms_mpi")


class ProcessWatch:
    """The process's communicators, its control channel and its watch thread.

    Args:
      stall_seconds: the stall warning threshold (0: no warnings).
    """

    def __init__(self, stall_seconds: float) -> None:
        self._stall = StallCheck(stall_seconds)
        # Call states, held strongly: a program may drop a communicator before it ends, and its
        # departure notice and its poisoned state still matter then (a state never holds its
        # communicator, and its buffers are small).
        self._comms: list[Any] = []
        self._channel: ControlChannel | None = None
        self._polling = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._blocked_since: dict[int, float] = {}
        self._departed: set[int] = set()  # world ranks whose notices came
        self._shut = False

    def register(self, comm: Any, whole_world: bool) -> None:
        """Adds a new communicator's call state; the first over the whole world makes the
        control channel.

        Collective when ``whole_world`` is true and no channel exists yet: every rank of the
        world is constructing this communicator then, so every rank makes the channel with it.
        """
        with self._lock:
            self._comms.append(comm)
            first_channel = whole_world and self._channel is None and not self._shut
        if first_channel:
            MPI = mpi()
            self._channel = ControlChannel(MPI)
            self._polling = self._channel.size > 1 and MPI.Query_thread() == MPI.THREAD_MULTIPLE
            if self._channel.size > 1 and not self._polling:
                _log.warning(
                    "mwms_mpi: MPI gives less than MPI_THREAD_MULTIPLE, so lost ranks are not "
                    "watched: a rank that leaves early can leave its peers waiting"
                )
            atexit.register(self.shutdown)
            keyval = MPI.Comm.Create_keyval(delete_fn=lambda *_: self.shutdown())
            MPI.COMM_SELF.Set_attr(keyval, True)
            if self._channel.size > 1:
                _lifecycle.abort_on_uncaught()
        self._start()

    def _start(self) -> None:
        with self._lock:
            wanted = self._polling or self._stall.seconds > 0
            if self._thread is not None or not wanted or self._shut:
                return
            self._thread = threading.Thread(target=self._run, name="mwms_mpi-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        stall_period = min(1.0, self._stall.seconds / 4) if self._stall.seconds > 0 else 0
        period = POLL_PERIOD_S if self._polling else stall_period
        next_stall = 0.0
        while not self._stop.wait(period):
            now = time.monotonic()
            if self._polling and self._channel is not None:
                for notice in self._channel.poll():
                    self._record(notice)
                self._act_on_losses(now)
            if stall_period and now >= next_stall:
                next_stall = now + stall_period
                for text in self._stall.check(list(self._comms), now):
                    _log.warning(text)

    def _record(self, notice: Notice) -> None:
        self._departed.add(notice.world_rank)
        completed = dict(notice.calls)
        for comm in list(self._comms):
            calls = completed.get(comm.id)
            if calls is not None and notice.world_rank in comm.world_ranks:
                comm.lost(notice.world_rank, calls)

    def _act_on_losses(self, now: float) -> None:
        for comm in list(self._comms):
            departed, busy = comm.departed, comm.busy
            if departed is None or busy is None or busy[1] <= departed[1]:
                self._blocked_since.pop(id(comm), None)
                continue
            since = self._blocked_since.setdefault(id(comm), now)
            if now - since >= BLOCKED_GRACE_S:
                self._abort_blocked(comm, busy, departed)

    def _abort_blocked(self, comm: Any, busy: Busy, departed: tuple[int, int]) -> None:
        MPI = mpi()
        world = MPI.COMM_WORLD
        op_name, n, context = busy
        gone, completed = departed
        _lifecycle.abort_job(
            1,
            f"[mwms_mpi] rank {world.Get_rank()} of {world.Get_size()}: rank {gone} left the "
            f"job after its call {completed} on communicator {comm.name}, but this rank is "
            f"blocked in {describe_call(op_name, n, context)}, which rank {gone} never "
            "entered; aborting the job",
        )

    def shutdown(self) -> None:
        """Stops the thread; then aborts (a poisoned communicator) or says goodbye to peers."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
            return
        if _lifecycle.agreed_exit_code() is not None or self._channel is None:
            return
        poisoned = [c for c in list(self._comms) if c.poisoned is not None]
        if poisoned and self._channel.size > 1:
            _lifecycle.abort_job(
                1,
                f"[mwms_mpi] rank {self._channel.rank} of {self._channel.size}: ending with "
                f"communicator {poisoned[0].name} poisoned ({poisoned[0].poisoned}); MPI cannot "
                "finalize with that collective in flight, so the job is aborted",
            )
        if self._polling:
            self._channel.announce(sorted((c.id, c.calls) for c in self._comms))
            self._channel.drain(len(self._departed))


@functools.cache
def process_watch() -> ProcessWatch:
    """The process's one watch, configured from ``MWMS_MPI_STALL_WARNING`` on first use."""
    return ProcessWatch(seconds_from_env())
