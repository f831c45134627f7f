"""Per-rank Chrome-trace files for the timeline, streamed so that a killed job still leaves one.

Each rank writes its own file, ``trace.rank<r>.json`` beside the path asked for, in Chrome's
"JSON Array Format": ``[``, then one event per line followed by a comma. A daemon thread
writes what has accumulated every half second, so a job that hangs and is then killed by its
launcher leaves every event up to the hang on disk; Chrome's trace viewer and Perfetto read
such an unterminated array, and :func:`read_events` here does too. At a normal exit the array
is closed, and rank 0 merges every rank's file into the path asked for (waiting a bounded time
for the other ranks to close theirs; ``mwms-mpi timeline merge`` does it by hand after a crash).

Nothing here touches MPI: the ranks' clocks share a zero taken just after a collective every
rank completed (the first timed communicator's construction), so events line up across ranks
to within that collective's exit skew (microseconds on one node).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from mwms_mpi import _env, _logging

WAIT_ENV = "MWMS_MPI_TIMELINE_WAIT"  # seconds rank 0 waits at exit for the other ranks' files
DEFAULT_WAIT_S = 10.0
FLUSH_PERIOD_S = 0.5
FLUSH_EVENTS = 4096  # the owning thread writes itself once this many events wait

_log = _logging.get_logger(__name__)


def rank_path(path: Path, rank: int) -> Path:
    """``trace.json`` -> ``trace.rank3.json`` (``trace`` -> ``trace.rank3``)."""
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def read_events(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The events of a per-rank file, and whether it was closed (its rank exited normally).

    Accepts the unterminated array a killed rank leaves (a trailing comma, no ``]``).
    """
    text = path.read_text().rstrip()
    closed = text.endswith("]")
    if not closed:
        text = text.rstrip(",") + "]"
    data = json.loads(text)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e], closed


def merge(paths: Sequence[Path], out: Path, other: dict[str, Any] | None = None) -> int:
    """Writes the events of ``paths`` into one trace file ``out``; returns the event count."""
    events: list[dict[str, Any]] = []
    for path in paths:
        events.extend(read_events(path)[0])
    data = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other or {}}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, out)
    return len(events)


class TraceFile:
    """This rank's trace file: events are queued by the calling thread and written in batches.

    Args:
      path: the merged trace the user asked for (``MWMS_MPI_TIMELINE``).
      rank: this process's ``COMM_WORLD`` rank.
      size: the size of ``COMM_WORLD``.
      host: this process's host name, shown in the track's name.
      render: turns a queued record into trace events (``timeline.py`` knows the records).
      pending: returns the trace events of calls in flight for longer than a flush period,
        each once (so a stalled call appears on disk while it is still waiting).
    """

    def __init__(
        self,
        path: Path,
        rank: int,
        size: int,
        host: str,
        render: Callable[[Any], Iterable[dict[str, Any]]],
        pending: Callable[[], Iterable[dict[str, Any]]],
    ) -> None:
        self.path = path
        self.rank = rank
        self.size = size
        self.wait_s = wait_seconds()  # read now: an error at exit would come too late
        self.own = rank_path(path, rank)
        self.zero_ns = time.perf_counter_ns()
        self.queue: deque[Any] = deque()
        self._render = render
        self._pending = pending
        self._lock = threading.Lock()
        self._closed = False
        self._threads: dict[str, int] = {}
        self.own.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.own.open("w")
        meta = [
            _meta("process_name", rank, 0, f"rank {rank} ({host})"),
            _meta("process_sort_index", rank, 0, rank, key="sort_index"),
        ]
        self._file.write("[\n" + "".join(json.dumps(e) + ",\n" for e in meta))
        self._file.flush()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mwms_mpi-timeline", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        _log.info("timeline: writing %s (merged into %s at exit)", self.own, path)

    def us(self, ns: int) -> float:
        """Microseconds since the shared zero, as trace timestamps are."""
        return (ns - self.zero_ns) / 1000.0

    def thread_id(self, name: str) -> int:
        """A track (trace ``tid``) for one communicator, named after it."""
        tid = self._threads.get(name)
        if tid is None:
            tid = self._threads[name] = len(self._threads) + 1
            self.queue.append(_meta("thread_name", self.rank, tid, name))
        return tid

    def add(self, record: Any) -> None:
        """Queues one record (the hot path: an append, a write every ``FLUSH_EVENTS``)."""
        self.queue.append(record)
        if len(self.queue) >= FLUSH_EVENTS:
            self.flush()

    def flush(self) -> None:
        """Writes what is queued, and the calls that have been in flight for a while."""
        with self._lock:
            if self._closed:
                return
            lines: list[str] = []
            while self.queue:
                record = self.queue.popleft()
                events = [record] if isinstance(record, dict) else self._render(record)
                lines.extend(json.dumps(e, separators=(",", ":")) + ",\n" for e in events)
            lines.extend(json.dumps(e, separators=(",", ":")) + ",\n" for e in self._pending())
            if lines:
                self._file.write("".join(lines))
                self._file.flush()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_PERIOD_S):
            try:
                self.flush()
            except (OSError, ValueError) as exc:  # a full disk must not end the program
                _log.warning("timeline: cannot write %s: %s", self.own, exc)
                return

    def close(self) -> None:
        """Closes this rank's array; rank 0 then merges every rank's file (bounded wait)."""
        self._stop.set()
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            end = _meta("process_labels", self.rank, 0, f"calls timed: rank {self.rank}", "labels")
            self._file.write(json.dumps(end) + "\n]\n")
            self._file.close()
        if self.rank == 0:
            self._merge_all()

    def _merge_all(self) -> None:
        paths = [rank_path(self.path, r) for r in range(self.size)]
        deadline = time.monotonic() + self.wait_s
        while not all(_closed(p) for p in paths) and time.monotonic() < deadline:
            time.sleep(0.05)
        present = [p for p in paths if p.exists()]
        missing = [r for r, p in enumerate(paths) if not _closed(p)]
        try:
            count = merge(present, self.path, {"ranks": self.size, "unfinished_ranks": missing})
        except (OSError, ValueError) as exc:
            _log.warning("timeline: could not merge %s: %s", self.path, exc)
            return
        if missing:
            _log.warning(
                "timeline: %s has %d events; ranks %s did not finish their files in time (kept "
                "beside it; `mwms-mpi timeline merge %s` merges them again later)",
                self.path,
                count,
                missing,
                self.path,
            )
            return
        for path in present:
            path.unlink(missing_ok=True)
        _log.info("timeline: wrote %d events of %d ranks to %s", count, self.size, self.path)


def _closed(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 3))
            return f.read().rstrip().endswith(b"]")
    except OSError:
        return False


def _meta(name: str, pid: int, tid: int, value: object, key: str = "name") -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def wait_seconds(environ: _env.Environ = None) -> float:
    """``MWMS_MPI_TIMELINE_WAIT``: how long rank 0 waits at exit for the other ranks' files.

    Raises:
      ValueError: naming the variable, unless it is a finite number >= 0 (10 when unset).
    """
    return _env.env_float(
        WAIT_ENV,
        DEFAULT_WAIT_S,
        minimum=0,
        what="seconds rank 0 waits at exit for the other ranks' timeline files",
        environ=environ,
    )
