"""What the device backends need of CUDA, in one small seam: streams, events, copies, pinned memory.

The staging pipeline (``staging.py``) is written against :class:`DeviceRuntime` only, so the
order of its copies, events and MPI calls is the same code whatever runs it: :class:`CupyRuntime`
on a GPU, or the numpy runtime the CPU tests use to run the pipeline through real MPI
(``tests/support/host_runtime.py``). CuPy is imported on first use only, which is never in a
numpy program: a CuPy array exists only once CuPy is imported.
"""

from __future__ import annotations

import types
from typing import Any, Protocol

import numpy as np


class DeviceRuntime(Protocol):
    """Streams, events and copies between device arrays and (pinned) host buffers."""

    @property
    def xp(self) -> types.ModuleType:
        """The device array module (``cupy``)."""
        ...

    def supports(self, array: object) -> bool:
        """Whether ``array`` is a device array of this runtime."""
        ...

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new uninitialised device array on the current device."""
        ...

    def pinned(self, nbytes: int) -> np.ndarray:
        """A new page-locked host buffer of ``nbytes`` bytes (uint8)."""
        ...

    def release_pinned(self) -> None:
        """Gives the memory of freed page-locked buffers back to the system."""
        ...

    def current_stream(self) -> Any:
        """The stream the caller's work is queued on (results must be ordered after it)."""
        ...

    def side_streams(self, array: Any) -> tuple[Any, Any]:
        """Two streams of ``array``'s device for copies (device-to-host, host-to-device)."""
        ...

    def record(self, stream: Any) -> Any:
        """An event marking the work queued on ``stream`` so far."""
        ...

    def wait(self, stream: Any, event: Any) -> None:
        """Makes ``stream`` wait for ``event`` before its later work."""
        ...

    def done(self, event: Any) -> bool:
        """Whether ``event`` has completed (never blocks)."""
        ...

    def synchronize(self, waitable: Any) -> None:
        """Blocks until a stream's queued work or an event has completed."""
        ...

    def to_host(self, device: Any, host: np.ndarray, stream: Any) -> None:
        """Queues a copy of contiguous ``device`` into ``host`` (same shape and dtype)."""
        ...

    def to_device(self, host: np.ndarray, device: Any, stream: Any) -> None:
        """Queues a copy of ``host`` into contiguous ``device`` (same shape and dtype)."""
        ...


class CupyRuntime:
    """:class:`DeviceRuntime` over CuPy (imported on first use)."""

    def __init__(self) -> None:
        self._cupy: Any = None
        self._streams: dict[int, tuple[Any, Any]] = {}

    @property
    def xp(self) -> types.ModuleType:
        """``cupy``, imported on first use."""
        if self._cupy is None:
            import cupy

            self._cupy = cupy
        module: types.ModuleType = self._cupy
        return module

    def supports(self, array: object) -> bool:
        """CuPy arrays (never imports CuPy: an array of it means it is imported)."""
        import sys

        cp = sys.modules.get("cupy")
        return cp is not None and isinstance(array, cp.ndarray)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """``cupy.empty`` on the current device."""
        return self.xp.empty(shape, dtype=dtype)

    def pinned(self, nbytes: int) -> np.ndarray:
        """``cupyx.empty_pinned``: page-locked, so copies to and from it run asynchronously."""
        import cupyx

        buffer: np.ndarray = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
        return buffer

    def release_pinned(self) -> None:
        """``free_all_blocks`` of CuPy's pinned memory pool, which keeps every freed block."""
        self.xp.get_default_pinned_memory_pool().free_all_blocks()

    def current_stream(self) -> Any:
        """CuPy's current stream on the current device."""
        return self.xp.cuda.get_current_stream()

    def side_streams(self, array: Any) -> tuple[Any, Any]:
        """Two non-blocking streams per device, made once."""
        device = array.device
        found = self._streams.get(device.id)
        if found is None:
            with device:
                cuda = self.xp.cuda
                found = (cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True))
            self._streams[device.id] = found
        return found

    def record(self, stream: Any) -> Any:
        """``stream.record()``: a new event."""
        return stream.record()

    def wait(self, stream: Any, event: Any) -> None:
        """``stream.wait_event(event)``."""
        stream.wait_event(event)

    def done(self, event: Any) -> bool:
        """``event.done``."""
        return bool(event.done)

    def synchronize(self, waitable: Any) -> None:
        """``synchronize()`` of a stream or an event."""
        waitable.synchronize()

    def to_host(self, device: Any, host: np.ndarray, stream: Any) -> None:
        """``device.get(out=host, stream=stream, blocking=False)``: asynchronous into pinned."""
        device.get(stream=stream, out=host, blocking=False)

    def to_device(self, host: np.ndarray, device: Any, stream: Any) -> None:
        """``device.set(host, stream=stream)``."""
        device.set(host, stream=stream)
