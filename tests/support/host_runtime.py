"""A CUDA runtime made of numpy, for running the staging pipeline through real MPI on the CPU.

``collective/backends/staging.py`` talks to CUDA only through ``DeviceRuntime`` (streams,
events, asynchronous copies). This one keeps each stream's copies in a queue and runs them
late: a copy happens only when something waits for it (``synchronize``) or, one step at a
time, when an event is polled (``done``). So a pipeline that hands a host buffer to MPI before
the copy into it was waited for, reads stale bytes and the tests' numpy references catch it;
one that reads a result before its copy back landed, likewise. "Device arrays" are plain
numpy arrays here; the MPI calls are real.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np


class Stream:
    """A queue of pending operations, run in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: list[Callable[[], None]] = []
        self.issued = 0  # operations ever queued
        self.ran = 0  # operations run

    def step(self) -> bool:
        """Runs the next pending operation; False if none is pending."""
        if not self.queue:
            return False
        self.queue.pop(0)()
        self.ran += 1
        return True

    def run_until(self, position: int) -> None:
        while self.ran < position and self.step():
            pass


class Event:
    """The point ``position`` of ``stream``'s operations."""

    def __init__(self, stream: Stream, position: int) -> None:
        self.stream = stream
        self.position = position


class HostRuntime:
    """``DeviceRuntime`` over numpy with deferred, in-order copies (see the module docstring).

    Attributes:
      pinned_calls: how many host buffers were "pinned" (the pool's allocations).
      released: how many times the pinned memory was given back (``release_pinned``).
      copies: how many copies ran, each way.
    """

    def __init__(self) -> None:
        self._current = Stream("current")
        self._sides = (Stream("down"), Stream("up"))
        self.pinned_calls = 0
        self.released = 0  # release_pinned calls
        self.copies = {"to_host": 0, "to_device": 0}

    @property
    def xp(self) -> types.ModuleType:
        return np

    def supports(self, array: object) -> bool:
        return isinstance(array, np.ndarray)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return np.empty(shape, dtype=dtype)

    def pinned(self, nbytes: int) -> np.ndarray:
        self.pinned_calls += 1
        return np.full(nbytes, 0xAB, dtype=np.uint8)  # stale bytes, never zeros by luck

    def release_pinned(self) -> None:
        self.released += 1

    def current_stream(self) -> Stream:
        return self._current

    def side_streams(self, array: Any) -> tuple[Stream, Stream]:
        return self._sides

    def record(self, stream: Stream) -> Event:
        return Event(stream, stream.issued)

    def wait(self, stream: Stream, event: Event) -> None:
        self._queue(stream, lambda: event.stream.run_until(event.position))

    def done(self, event: Event) -> bool:
        event.stream.step()  # progress, one operation per poll
        return event.stream.ran >= event.position

    def synchronize(self, waitable: Stream | Event) -> None:
        if isinstance(waitable, Event):
            waitable.stream.run_until(waitable.position)
        else:
            waitable.run_until(waitable.issued)

    def to_host(self, device: Any, host: np.ndarray, stream: Stream) -> None:
        assert device.shape == host.shape and device.dtype == host.dtype
        self._queue(stream, lambda: self._copy("to_host", host, device))

    def to_device(self, host: np.ndarray, device: Any, stream: Stream) -> None:
        assert device.shape == host.shape and device.dtype == host.dtype
        self._queue(stream, lambda: self._copy("to_device", device, host))

    def pending(self) -> int:
        """Operations queued on any stream and not run yet."""
        return sum(len(s.queue) for s in (self._current, *self._sides))

    def _copy(self, way: str, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)
        self.copies[way] += 1

    @staticmethod
    def _queue(stream: Stream, op: Callable[[], None]) -> None:
        stream.queue.append(op)
        stream.issued += 1
