"""Departure notices: a rank that leaves the job tells its peers how far it got.

When a rank ends (normally, by ``sys.exit``, or after an error it caught), it sends every
other rank one small notice on a control communicator (a duplicate of ``COMM_WORLD`` that
carries nothing else): for each of its communicators, the number of calls it completed there. A
peer that waits in a call with a higher number knows that call can never complete, and the
process watch (``watch.py``) acts on it. A notice is never a failure by itself: ranks that
finish at different times send notices that no waiting call outlives.

The channel also carries questions and answers between live ranks (``positions.py``): a rank
asks its peers where they are (``ASK_TAG``), each peer's watch answers (``ANSWER_TAG``). Every
send is nonblocking and tracked here, so neither the watch thread nor an asker ever waits on a
peer that does not receive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

NOTICE_TAG = 0x4D57  # a departure notice
ASK_TAG = 0x4D58  # "where are you?" (positions.Ask)
ANSWER_TAG = 0x4D59  # a peer's positions.Position
ANNOUNCE_WAIT_S = 2.0  # how long a leaving rank waits for its notices to be delivered
DRAIN_WAIT_S = 0.2  # how long it waits for its peers' notices (they leave too, usually)


class Notice(NamedTuple):
    """A rank's departure: its world rank and, per communicator id, the calls it completed."""

    world_rank: int
    calls: tuple[tuple[int, int], ...]


class ControlChannel:
    """A duplicate of ``COMM_WORLD`` for departure notices, questions and answers (construction
    is collective).

    Args:
      mpi: the ``mpi4py.MPI`` module.
    """

    def __init__(self, mpi: Any) -> None:
        self._mpi = mpi
        self.comm = mpi.COMM_WORLD.Dup()
        self.rank: int = self.comm.Get_rank()
        self.size: int = self.comm.Get_size()
        self._sends: list[Any] = []  # requests of send(): each keeps its pickled buffer alive
        self._lock = threading.Lock()  # send() runs on the watch thread and the main thread

    def announce(self, calls: Sequence[tuple[int, int]]) -> None:
        """Sends this rank's notice to every other rank; waits a little for delivery.

        Small messages are delivered eagerly, so the sends complete without the receivers;
        the wait is bounded so that a leaving rank never hangs on a peer that is gone too.
        """
        notice = Notice(self.rank, tuple(calls))
        requests = [
            self.comm.isend(notice, dest=peer, tag=NOTICE_TAG)
            for peer in range(self.size)
            if peer != self.rank
        ]
        until = time.monotonic() + ANNOUNCE_WAIT_S
        while requests and time.monotonic() < until:
            requests = [r for r in requests if not r.Test()]
            if requests:
                time.sleep(1e-3)

    def send(self, message: Any, peer: int, tag: int) -> None:
        """Sends ``message`` to ``peer`` without waiting (a question or an answer).

        Completed sends are dropped here; a pending one is kept, since its request holds the
        buffer. A peer that never receives leaves one small buffer until the process ends.
        """
        request = self.comm.isend(message, dest=peer, tag=tag)
        with self._lock:
            self._sends = [r for r in self._sends if not r.Test()]
            self._sends.append(request)

    def receive(self, tag: int) -> list[Any]:
        """The messages with ``tag`` that have arrived, without waiting (one thread per tag)."""
        found = []
        status = self._mpi.Status()
        while self.comm.iprobe(source=self._mpi.ANY_SOURCE, tag=tag, status=status):
            found.append(self.comm.recv(source=status.Get_source(), tag=tag))
        return found

    def poll(self) -> list[Notice]:
        """The notices that have arrived, without waiting."""
        return self.receive(NOTICE_TAG)

    def drain(self, already: int = 0, seconds: float = DRAIN_WAIT_S) -> None:
        """Receives peers' notices until every peer's has come, or ``seconds`` pass.

        Called after :meth:`announce` when this rank leaves: ranks that end together each get
        every other's notice, so none is left unreceived at ``MPI_Finalize`` (UCX warns about
        each). A peer still at work sends its notice later, to a rank that is gone: bounded.
        Questions and answers that came too late to matter are received and dropped too.

        Args:
          already: notices received before (by the watch) that count toward every peer's.
          seconds: the bound.
        """
        missing = self.size - 1 - already
        until = time.monotonic() + seconds
        while missing > 0 and time.monotonic() < until:
            missing -= len(self.poll())
            if missing > 0:
                time.sleep(1e-3)
        self.receive(ASK_TAG)
        self.receive(ANSWER_TAG)
