"""CUDA streams, events and device memory for the fake CuPy: queued work runs only when waited for.

The fake CuPy (``fake_cupy.py``) runs array operations at once, on the host. The NCCL double
(``fake_nccl.py``) does not: like a GPU, it queues its results on the stream it was handed, and
they land only when something orders itself after that stream. So a caller that reads an NCCL
result on another stream, without an event or a ``synchronize`` in between, reads the bytes that
were there before (stale), and the tests' numpy references catch it, as the deferred copies of
``host_runtime.py`` do for the staging pipeline.

CUDA's rules, as modelled here (conservatively: a wait may run more than it must, never less):

* work on one stream runs in order; an operation on the current stream (any fake array
  operation, a host copy) first runs everything queued on that stream;
* the legacy default ("null") stream of a device is ordered with every blocking stream of that
  device, both ways; streams made with ``non_blocking=True`` are ordered with nothing but
  themselves;
* ``stream.wait_event(e)`` orders the stream's later work after ``e``; ``e.synchronize()`` and
  ``stream.synchronize()`` run what they wait for; ``e.done`` advances one step per poll.

Device memory is what fake arrays own. ``register`` (called when an array's ``.data`` is read,
which is how a pointer reaches NCCL) remembers each allocation's extent, device and the dtype
the pointer was taken with, so that the double can refuse a pointer outside device memory, a
count that runs past an allocation, or a reduction whose datatype is not the buffer's.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

_lock = threading.RLock()
_local = threading.local()  # .device: the current device; .streams: {device: [stream, ...]}
_handles = itertools.count(0x5000)  # stream "pointers" (0 is each device's null stream)
_streams: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
_nulls: dict[int, Stream] = {}
_queued = [0]  # operations queued on any stream and not run (the fast path reads it)
_busy: set[Stream] = set()  # streams with queued work: alive until it has run, as CUDA's
_access_hooks: list[Callable[[], None]] = []  # run before every access (the NCCL group check)


def current_device() -> int:
    """The calling thread's current device (0 until it sets one), as CUDA's."""
    return int(getattr(_local, "device", 0))


def set_current_device(device: int) -> None:
    _local.device = int(device)


class Stream:
    """A fake CUDA stream: a queue of deferred operations, run in order when waited for.

    Args:
      null: the device's legacy default stream (``ptr`` 0); use :func:`null_stream`.
      non_blocking: not ordered with the null stream (CUDA's ``cudaStreamNonBlocking``).
      ptds: accepted for CuPy's signature; per-thread default streams are not modelled.
    """

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
        self.device_id = current_device()
        self.is_null = bool(null)
        self.non_blocking = bool(non_blocking) and not null
        self.ptr = 0 if null else next(_handles)
        self._queue: deque[Callable[[], None]] = deque()
        self.issued = 0  # operations ever queued
        self.ran = 0  # operations run
        if not null:
            _streams[self.ptr] = self

    def __repr__(self) -> str:
        kind = "null" if self.is_null else ("non-blocking" if self.non_blocking else "blocking")
        return f"<fake {kind} stream {self.ptr:#x} of device {self.device_id}>"

    # -- CuPy's API ---------------------------------------------------------------------------

    def record(self, event: Event | None = None) -> Event:
        """An event marking the work queued on this stream so far."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Orders this stream's later work after ``event``."""
        source, position = event.stream, event.position
        if source is None or source is self or source.ran >= position:
            return
        enqueue(self, lambda: run_until(source, position))

    def synchronize(self) -> None:
        """Runs everything this stream waits for."""
        flush(self)

    def use(self) -> Stream:
        """Makes this stream current on its device in this thread (until another is used)."""
        stack = _stack(self.device_id)
        stack[-1:] = [self]
        return self

    def __enter__(self) -> Stream:
        _stack(self.device_id).append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack(self.device_id).pop()

    @property
    def done(self) -> bool:
        """Whether nothing is queued (one step of progress per poll)."""
        self.step()
        return self.ran >= self.issued

    # -- the queue ------------------------------------------------------------------------------

    def step(self) -> bool:
        """Runs the next queued operation; False if none is queued."""
        with _lock:
            if not self._queue:
                return False
            operation = self._queue.popleft()
            _queued[0] -= 1
            self.ran += 1
            if not self._queue:
                _busy.discard(self)
        operation()
        return True


class _NullOfCurrentDevice:
    """``cupy.cuda.Stream.null``: the current device's legacy default stream."""

    def __get__(self, obj: object, owner: type) -> Stream:
        return null_stream(current_device())


Stream.null = _NullOfCurrentDevice()  # type: ignore[attr-defined]


class Event:
    """A point in a stream's queue: done when the stream has run that far."""

    def __init__(
        self, block: bool = False, disable_timing: bool = False, interprocess: bool = False
    ) -> None:
        self.stream: Stream | None = None
        self.position = 0

    def record(self, stream: Stream | None = None) -> None:
        self.stream = current_stream() if stream is None else stream
        self.position = self.stream.issued

    @property
    def done(self) -> bool:
        """Whether the stream has run to this point (advances it one step per poll, never
        blocks: a poller that gives up early sees work still pending)."""
        stream = self.stream
        if stream is None or stream.ran >= self.position:
            return True
        stream.step()
        return stream.ran >= self.position

    def synchronize(self) -> None:
        if self.stream is not None:
            run_until(self.stream, self.position)


def null_stream(device: int) -> Stream:
    """The legacy default stream of ``device`` (one per device, ``ptr`` 0)."""
    with _lock:
        found = _nulls.get(device)
        if found is None:
            saved = current_device()
            set_current_device(device)
            found = _nulls[device] = Stream(null=True)
            set_current_device(saved)
        return found


def _stack(device: int) -> list[Stream]:
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    stack: list[Stream] | None = streams.get(device)
    if stack is None:
        stack = streams[device] = [null_stream(device)]
    return stack


def current_stream(device: int | None = None) -> Stream:
    """The calling thread's current stream on ``device`` (default: the current device)."""
    return _stack(current_device() if device is None else device)[-1]


def lookup(ptr: int, device: int) -> Stream | None:
    """The live stream with handle ``ptr`` (0: ``device``'s null stream), else ``None``."""
    if ptr == 0:
        return null_stream(device)
    return _streams.get(ptr)


def enqueue(stream: Stream, operation: Callable[[], None]) -> None:
    """Queues ``operation`` on ``stream``: it runs when something waits for the stream."""
    with _lock:
        stream._queue.append(operation)
        stream.issued += 1
        _queued[0] += 1
        _busy.add(stream)


def run_until(stream: Stream, position: int) -> None:
    while stream.ran < position and stream.step():
        pass


def _ordered_with(stream: Stream) -> list[Stream]:
    """What work on ``stream`` is ordered after: itself, or (legacy) the device's null stream
    and every blocking stream of the device."""
    if stream.non_blocking:
        return [stream]
    device = stream.device_id
    blocking = [s for s in list(_streams.values()) if s.device_id == device and not s.non_blocking]
    return [*blocking, null_stream(device)]


def flush(stream: Stream) -> None:
    """Runs everything queued that work on ``stream`` is ordered after."""
    if not _queued[0]:
        return
    for s in _ordered_with(stream):
        run_until(s, s.issued)


def synchronize_device(device: int) -> None:
    """``Device.synchronize()``: runs everything queued on the device's streams."""
    for s in [*list(_streams.values()), null_stream(device)]:
        if s.device_id == device:
            run_until(s, s.issued)


def before_access(stream: Stream | None = None) -> None:
    """Called before a fake array operation on ``stream`` (default: the current stream):
    orders it after that stream's queued work (and runs the registered checks)."""
    for hook in _access_hooks:
        hook()
    if _queued[0]:
        flush(current_stream() if stream is None else stream)


# -- device memory ------------------------------------------------------------------------------


class Allocation(NamedTuple):
    """A device allocation that a pointer was taken from."""

    low: int
    high: int
    device: int
    owner: np.ndarray  # the array owning the memory (keeps it alive while in use)


_allocations: dict[int, tuple[int, int, weakref.ref[np.ndarray]]] = {}
_dead: list[weakref.ref[np.ndarray]] = []  # freed owners' references, dropped under the lock
_pointer_dtypes: dict[int, tuple[np.dtype, int]] = {}  # ptr -> (dtype, allocation low)


try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # numpy 1.x
    _byte_bounds = np.byte_bounds  # type: ignore[attr-defined]


def _owner(array: np.ndarray) -> np.ndarray:
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    return owner


def _drop_dead() -> None:
    """Forgets freed allocations. (A weakref callback only appends: it may run inside any
    allocation, also while the table is being read.)"""
    while _dead:
        ref = _dead.pop()
        for low, entry in list(_allocations.items()):
            if entry[2] is ref:
                del _allocations[low]


def register(array: np.ndarray, device: int) -> int:
    """Remembers the allocation of device array ``array``; returns its data pointer."""
    ptr = int(array.__array_interface__["data"][0])
    owner = _owner(array)
    low, high = _byte_bounds(owner)
    with _lock:
        _drop_dead()
        known = _allocations.get(low)
        if known is None or known[2]() is not owner:
            _allocations[low] = (high, device, weakref.ref(owner, _dead.append))
        if len(_pointer_dtypes) > 4096:  # addresses are reused: keep the recent ones
            _pointer_dtypes.clear()
        _pointer_dtypes[ptr] = (array.dtype, low)
    return ptr


def find(ptr: int) -> Allocation | None:
    """The live device allocation holding address ``ptr``, or ``None``."""
    with _lock:
        _drop_dead()
        for low, (high, device, ref) in list(_allocations.items()):
            owner = ref()
            if owner is not None and low <= ptr < max(high, low + 1):
                return Allocation(low, high, device, owner)
    return None


def pointer_dtype(ptr: int, allocation: Allocation) -> np.dtype | None:
    """The dtype of the array ``ptr`` was last taken from (``None`` for pointer arithmetic)."""
    found = _pointer_dtypes.get(ptr)
    if found is None or found[1] != allocation.low:
        return None
    return found[0]
