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
* **Positions** (``positions.py``): a peer's question on the control channel ("where are
  you?") is answered by the thread at once with this rank's collectives in flight and the
  status its owner set (:meth:`ProcessWatch.set_status_source`: the pytest plugin's test and
  phase); :meth:`ProcessWatch.ask` and :meth:`ProcessWatch.answers` are the asking side. A
  normal run pays one more ``Iprobe`` per poll.
* **Leaving**: at interpreter exit (``atexit``, before mpi4py's ``MPI_Finalize``) or in an
  explicit ``MPI.Finalize()`` (a ``COMM_SELF`` attribute's delete callback), the thread is
  stopped and joined and this rank's notice is sent, unless every rank agreed to stop
  (``_lifecycle.agreed_exit``). A communicator poisoned by a timeout still has a collective in
  flight, with which MPI cannot finalize: the job is aborted instead, saying why. So is a rank
  that saw a peer's process failure (ULFM) and reaches the interpreter's exit, where its
  status cannot be known: it ends with status 1 without ``MPI_Finalize``, which can hang
  after a failure (``_lifecycle``).
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
from collections.abc import Callable
from typing import Any

from mwms_mpi import _lifecycle
from mwms_mpi._mpi import mpi
from mwms_mpi.collective import fence, ulfm
from mwms_mpi.collective.departures import ANSWER_TAG, ASK_TAG, ControlChannel, Notice
from mwms_mpi.collective.positions import Ask, Position, calls_in_flight
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
        self._status_source: Callable[[], Any] | None = None

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
                if ulfm.enabled(MPI):
                    fence.prepare()
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
                try:
                    for notice in self._channel.poll():
                        self._record(notice)
                    for ask in self._channel.receive(ASK_TAG):
                        self._answer(ask)
                except mpi().Exception as exc:
                    self._channel_failed(exc)
                    if not stall_period:
                        return  # nothing left for the thread to do
                    period = stall_period
                self._act_on_losses(now)
            if stall_period and now >= next_stall:
                next_stall = now + stall_period
                for text in self._stall.check(list(self._comms), now):
                    _log.warning(text)

    def _channel_failed(self, exc: Exception) -> None:
        """The control channel met an MPI error: it is polled no more (and no departure notice
        is sent at exit). Under ULFM that is a peer's process failure, which every collective
        reports itself (``ulfm.py``); anything else is logged, once."""
        self._polling = False
        if ulfm.is_process_failure(mpi(), exc):
            _lifecycle.note_peer_failure()
            _log.info("the lost-rank watch stops: a peer's process failed (%s)", exc)
        else:
            _log.warning("the lost-rank watch stops: its channel failed in MPI (%s)", exc)

    def _record(self, notice: Notice) -> None:
        self._departed.add(notice.world_rank)
        completed = dict(notice.calls)
        for comm in list(self._comms):
            calls = completed.get(comm.id)
            if calls is not None and notice.world_rank in comm.world_ranks:
                comm.lost(notice.world_rank, calls)

    def _answer(self, ask: Ask) -> None:
        if self._channel is None:
            return
        source = self._status_source
        try:
            status = source() if source is not None else None
        except Exception as exc:  # the owner's bug must not kill the watch
            status = f"(status unavailable: {exc!r})"
        position = Position(
            self._channel.rank, ask.token, calls_in_flight(list(self._comms)), status
        )
        self._channel.send(position, ask.world_rank, ANSWER_TAG)

    # -- the asking side (any thread but the watch's) -------------------------------------------

    def set_status_source(self, source: Callable[[], Any] | None) -> None:
        """Sets what this rank's answers carry besides its calls: ``source()``, called on the
        watch thread when a peer asks (keep it quick, and make it return a picklable value)."""
        self._status_source = source

    def ask(self, token: Any) -> bool:
        """Asks every peer where it is; their answers come back through :meth:`answers`.

        Returns:
          Whether the question went out: ``False`` where no peer can answer (no communicator
          over the whole world yet, one rank, or MPI without ``MPI_THREAD_MULTIPLE``).
        """
        channel = self._channel
        if channel is None or not self._polling or self._thread is None or self._shut:
            return False
        for peer in range(channel.size):
            if peer != channel.rank:
                channel.send(Ask(channel.rank, token), peer, ASK_TAG)
        return True

    def answers(self, token: Any) -> list[Position]:
        """The answers that have arrived to the question ``token``; others are dropped."""
        channel = self._channel
        if channel is None:
            return []
        return [p for p in channel.receive(ANSWER_TAG) if p.token == token]

    def completed_calls(self) -> dict[int, int]:
        """This rank's calls so far per communicator id (its completed calls, when this rank
        has no call in flight)."""
        return {comm.id: comm.calls for comm in list(self._comms)}

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
        if _lifecycle.peer_failure_seen() and self._channel.size > 1:
            # Not MPI_Abort: under --with-ft ulfm its error code was seen lost (the job ended
            # with status 0 under load), which would make this a false success.
            sys.stderr.write(
                f"[mwms_mpi] rank {self._channel.rank} of {self._channel.size}: ending after "
                "a peer's process failure; MPI_Finalize can hang after one, and a plain "
                "`python` exit's status cannot be known here, so this rank ends with status "
                "1. Run the program as `python -m mwms_mpi.run program.py`: it ends with the "
                "program's own status, without MPI_Finalize (docs/elastic.md)\n"
            )
            _lifecycle.exit_without_finalize(1)
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
