"""Ending the process of a rank that MPI declared failed while it still lives (a frozen rank).

Under ULFM with Open MPI's heartbeat detector (``mwms-mpi launch --elastic``,
docs/elastic.md), a rank that stops answering (stopped by ``SIGSTOP``, hung in the kernel, a
thread deadlocked holding the interpreter) is declared failed once its heartbeats have been
missing for the detector's timeout, and the survivors go on without it. Its process lives on:
the launcher (``prterun``) does not end while it does, so the job would never end, and if it
woke up it could act as the rank it was (the chief writing a checkpoint). So every survivor
that learns of a failure ends each failed rank's process that runs on its own host, by
``SIGKILL``. A process is identified by (host, pid, start time), gathered once over
``COMM_WORLD`` when the first multi-rank communicator is made, so that a pid the kernel gave
to another process since is never signalled.

The limit: a failed rank on a host where no rank survived (every rank of a node froze) is not
ended: nothing of this job runs there to do it. Its launcher daemon and the batch system's
time limit end it; docs/elastic.md says so.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterable

from mwms_mpi import _mpi
from mwms_mpi._logging import get_logger

_log = get_logger(__name__)

Process = tuple[str, int, int]  # (host name, pid, start time in clock ticks after boot)
_processes: list[Process] | None = None  # by COMM_WORLD rank
_me = -1  # this process's COMM_WORLD rank
_ended: set[int] = set()  # the ranks this process signalled (each once)


def prepare() -> None:
    """Gathers every rank's process (collective over ``COMM_WORLD``; once)."""
    global _processes, _me
    if _processes is None:
        comm = _mpi.mpi().COMM_WORLD.Dup()
        try:
            _processes, _me = list(comm.allgather(_this_process())), comm.Get_rank()
        finally:
            comm.Free()


def end(world_ranks: Iterable[int]) -> list[int]:
    """Ends, by ``SIGKILL``, the live processes of ``world_ranks`` (ranks MPI declared failed)
    that run on this host; returns the ranks it signalled."""
    if _processes is None:
        return []
    me = _me
    host = _processes[me][0]
    ended = []
    for rank in world_ranks:
        if rank == me or rank in _ended or not 0 <= rank < len(_processes):
            continue
        where, pid, started = _processes[rank]
        if where != host or _state(pid, started) in (None, "Z", "X"):
            continue  # elsewhere, gone, or dead and not yet reaped (a crash, not a freeze)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        ended.append(rank)
        _ended.add(rank)
        _log.warning(
            "rank %d ended rank %d (pid %d on %s) by SIGKILL: MPI declared it failed while "
            "its process still lived (frozen or hung)",
            me,
            rank,
            pid,
            host,
        )
    return ended


def _this_process() -> Process:
    pid = os.getpid()
    stat = _stat(pid)
    return socket.gethostname(), pid, int(stat[19]) if stat else -1


def _state(pid: int, started: int) -> str | None:
    """The process's state letter (``ps``'s), or None if ``pid`` is not that process now."""
    stat = _stat(pid)
    if stat is None or int(stat[19]) != started:
        return None
    return stat[0]


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()
