"""The timeline: ``MWMS_MPI_TIMELINE=trace.json`` records every collective of every rank.

As Horovod's timeline does, it lets a slow or stalled step be seen rather than guessed: open
the file in Perfetto (ui.perfetto.dev) or ``chrome://tracing``. Each rank is a process track,
each communicator a thread track in it, and each collective call one slice named after what
the user called (``Strategy.reduce``; the collective itself when called directly), with:

* ``collective``, ``op``, ``call`` (its number on the communicator) and ``bytes`` (this rank's
  payload; ``null`` where ``MWMS_MPI_CHECK=first`` skipped the agreement that describes it);
* ``agreement_us``: from the call's start until every rank had agreed on it. The agreement is
  where ranks meet, so a rank that came early spends its wait for the others here;
* ``wait_us``: the part of that time this rank waited for its peers, estimated as the
  agreement's time beyond the fastest agreement seen on this communicator;
* ``transfer_us``: moving the data once every rank had agreed.

A call that has waited more than half a second is written at once as an open slice (``B``),
closed when it ends, so a job that hangs and is killed still shows where each rank waits.

Off (the default) it costs one ``is None`` test per event of a call. On, each communicator's
call template (``protocol.py``) has a :class:`Timing` hook, which stamps the clock when a call
starts, when it is agreed and when it ends. Files: see ``trace_file.py``.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from mwms_mpi import _env, _lifecycle, _logging, _mpi
from mwms_mpi.collective.agreement import Agreement
from mwms_mpi.collective.signature import ANY, Layout
from mwms_mpi.collective.stall import Busy
from mwms_mpi.collective.trace_file import FLUSH_PERIOD_S, TraceFile

TIMELINE_ENV = "MWMS_MPI_TIMELINE"

_log = _logging.get_logger(__name__)
_trace: TraceFile | None = None
_states: list[Timing] = []


def call_hook(agreement: Agreement, name: str, world_ranks: tuple[int, ...]) -> Timing | None:
    """A communicator's timeline hook when ``MWMS_MPI_TIMELINE`` names a file, else ``None``.

    Called by every rank of a new communicator just after its agreement's construction (a
    collective), which is where the first one takes the ranks' shared clock zero.
    """
    _log.info(
        "communicator %s: %d ranks (world ranks %s), agreement %s",
        name,
        len(world_ranks),
        _ranges(world_ranks),
        "on every call" if agreement.every_call else "on first use only (MWMS_MPI_CHECK=first)",
    )
    path = trace_path()
    if path is None:
        return None
    if _trace is not None and _trace.path != path.resolve():
        _log.warning("timeline: %s=%s ignored, already writing %s", TIMELINE_ENV, path, _trace.path)
    return Timing(_trace_file(path), name)


def trace_path(environ: _env.Environ = None) -> Path | None:
    """The trace ``MWMS_MPI_TIMELINE`` asks for, or ``None`` (off) when it is unset or blank.

    Each rank writes ``<stem>.rank<r><suffix>`` beside it and rank 0 merges them into it, so
    it must name a file: ``MWMS_MPI_TIMELINE=/tmp`` used to write ``/tmp.rank0`` into ``/``.

    Raises:
      ValueError: naming the variable, if the path is a directory or ends with a separator.
    """
    return _env.env_path(
        TIMELINE_ENV,
        what="each rank writes <stem>.rank<r><suffix> beside it, merged into it at exit",
        environ=environ,
    )


def close() -> None:
    """Writes and closes this process's trace now (rank 0 merges); later calls go untimed.

    At exit this happens by itself; a program (the benchmark) that wants the file earlier, or
    no more timing, calls it on every rank.
    """
    global _trace
    if _trace is not None:
        _trace.close()
    _trace = None
    _states.clear()


def _trace_file(path: Path) -> TraceFile:
    global _trace
    if _trace is None:
        _trace = TraceFile(
            path.resolve(),
            _mpi.world_rank(),
            _mpi.world_size(),
            socket.gethostname(),
            _render,
            _pending,
        )
        _lifecycle.before_abort(_trace.flush)
    return _trace


class Timing:
    """The call template's hook (``protocol.CallHook``) that records each call of one
    communicator in the trace: its start, the end of its agreement and its end."""

    def __init__(self, trace: TraceFile, name: str) -> None:
        self.trace = trace
        self.name = name
        self.busy: Busy | None = None  # the call in flight, for open slices
        self.started_ns = self._agreed = 0
        self.nbytes: int | None = None
        self.open = False  # written as an open slice already (a long wait)
        self._fastest = math.inf
        self.tid = trace.thread_id(name)
        _states.append(self)

    def started(self, busy: Busy) -> None:
        """A call starts."""
        self.busy = busy
        self.started_ns, self._agreed = time.perf_counter_ns(), 0
        self.nbytes, self.open = None, False

    def agreed(self, layout: Layout | None, value: int) -> None:
        """Every rank agreed the call (``layout`` ``None``: trusted without an agreement)."""
        self._agreed = time.perf_counter_ns()
        self.nbytes = None if layout is None else payload(layout, value)

    def ended(self, busy: Busy) -> None:
        """The call ended, however: its slice is queued for the trace."""
        now = time.perf_counter_ns()
        self.busy = None
        agreed = self._agreed
        if agreed:
            self._fastest = min(self._fastest, agreed - self.started_ns)
        wait = (agreed - self.started_ns - self._fastest) if agreed else 0
        self.trace.add(
            (self, busy, self.started_ns, agreed, now, self.nbytes, max(0, wait), self.open)
        )


def payload(layout: Layout, rows: int) -> int:
    """This rank's bytes in a call of ``layout`` (``rows`` along a gather's open axis)."""
    total = 0
    for dtype, shape in layout.items:
        count = 1
        for d in shape:
            count *= rows if d == ANY else d
        total += count * np.dtype(dtype).itemsize
    return total


def _name(busy: Busy) -> str:
    op_name, _, context = busy
    return context[0] if context is not None and context[0] else op_name


def _args(busy: Busy, state: Timing, nbytes: int | None) -> dict[str, Any]:
    op_name, n, context = busy
    op = context[1] if context is not None and context[1] else ""
    return {"collective": op_name, "op": op, "call": n, "bytes": nbytes, "comm": state.name}


def _render(record: Any) -> Iterable[dict[str, Any]]:
    """The trace event of a finished call (``E`` if its open slice was written already)."""
    state, busy, started, agreed, ended, nbytes, wait, was_open = record
    trace = state.trace
    args = _args(busy, state, nbytes)
    args.update(
        agreement_us=round(((agreed or ended) - started) / 1e3, 3),
        wait_us=round(wait / 1e3, 3),
        transfer_us=round((ended - agreed) / 1e3, 3) if agreed else 0.0,
        agreed=bool(agreed),
    )
    event: dict[str, Any] = {"pid": trace.rank, "tid": state.tid, "args": args}
    if was_open:
        return [{**event, "ph": "E", "ts": trace.us(ended)}]
    name, cat = _name(busy), busy[0]
    ts, dur = trace.us(started), (ended - started) / 1e3
    return [{**event, "name": name, "cat": cat, "ph": "X", "ts": ts, "dur": round(dur, 3)}]


def _pending() -> Iterable[dict[str, Any]]:
    """Open slices for calls in flight longer than a flush period (each written once)."""
    now = time.perf_counter_ns()
    for state in list(_states):
        busy = state.busy
        if busy is None or state.open or now - state.started_ns < FLUSH_PERIOD_S * 1e9:
            continue
        state.open = True
        trace = state.trace
        args = {**_args(busy, state, state.nbytes), "in_flight_at_us": trace.us(now)}
        yield {
            "name": _name(busy),
            "cat": busy[0],
            "ph": "B",
            "ts": trace.us(state.started_ns),
            "pid": trace.rank,
            "tid": state.tid,
            "args": args,
        }


def _ranges(ranks: tuple[int, ...]) -> str:
    if ranks == tuple(range(len(ranks))):
        return f"0-{len(ranks) - 1}" if len(ranks) > 1 else "0"
    return ",".join(map(str, ranks))
