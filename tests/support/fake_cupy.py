"""A stand-in for CuPy on machines without a GPU: CuPy's array type and API over host memory.

The GPU suites (``tests/gpu``) are written against CuPy and run on the GPU machine with the
real one (``make test-gpu``). Installed with :func:`install` (``MWMS_TEST_FAKE_CUPY=1``), this
module plays ``cupy``, ``cupy.cuda`` and ``cupyx`` so that the same suites run on any machine:
what they then check is the package's routing of device arrays (kinds, agreed layouts,
transports, placement on replicas' devices, results that stay device arrays, checkpoint and
input paths), never CUDA itself: copies are host copies and every "GPU" is a host buffer. Like
CuPy, its arrays refuse to mix with numpy arrays in arithmetic, so a path that forgets to move a
value where it belongs fails here too.

``cupy.cuda.nccl`` is an NCCL double (``fake_nccl.py``): it checks the NCCL calls' arguments,
call order across ranks, streams and groups, and moves the data over MPI. Its results are queued
on CUDA-like streams (``fake_streams.py``): array operations here run at once, on the current
stream, after what is queued there, so a result read on a stream that was not ordered after it
is stale. Every write to fake device memory is deferred the same way (:func:`_written_later`):
computed at once from inputs the current stream is ordered after, it lands in the array's
memory only when its stream runs, and until then a reader not ordered after that stream (MPI
handed the array's memory, a copy on another stream) sees the bytes that were there before, or
a poison pattern (``0xA5`` bytes) in memory just allocated. So a deleted ``synchronize()`` before
MPI reads a device buffer, or a copy not ordered after the work that wrote its source, gives a
wrong number here as it may on a GPU. ``get()`` and ``asnumpy`` (blocking) wait for the stream,
as CuPy's do. Every process's GPU 0 has one PCI bus id, so ranks on one host share a GPU (and NCCL
refuses them) unless :func:`own_gpus` (or ``MWMS_TEST_FAKE_CUPY_OWN_GPUS=1``) gives each rank
its own.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from tests.support import fake_nccl, fake_streams
from tests.support.fake_streams import Event, Stream

GPUS_ENV = "MWMS_TEST_FAKE_CUPY_GPUS"  # how many fake GPUs a process sees (default 1)
OWN_GPUS_ENV = "MWMS_TEST_FAKE_CUPY_OWN_GPUS"  # "1": each rank's GPUs are its own (bus ids)
_own = [os.environ.get(OWN_GPUS_ENV) == "1"]
_current_id = fake_streams.current_device
_touch = fake_streams.before_access  # before an operation on a stream (default: the current)
POISON = 0xA5  # the byte of fake device memory allocated and not yet written by its stream


def _poison(array: np.ndarray) -> None:
    """Fills ``array`` (any layout) with the poison byte pattern."""
    array[...] = np.frombuffer(bytes([POISON]) * array.dtype.itemsize, dtype=array.dtype)[0]


def _written_later(target: np.ndarray, new: np.ndarray, old: np.ndarray | None) -> None:
    """Makes ``new`` (the values a device operation computed for ``target``, a plain view of
    fake device memory) land when the current stream runs: until then ``target`` holds
    ``old``, or poison where ``old`` is ``None`` (memory just allocated)."""
    staged = np.array(new, copy=True)
    if old is None:
        _poison(target)
    else:
        np.copyto(target, old)
    fake_streams.enqueue(fake_streams.current_stream(), lambda: np.copyto(target, staged))


def _fresh(result: Any, inputs: Any) -> Any:
    """A device operation's result: new memory (sharing none with a fake input) is written
    later (poison until then); a view of an input is returned as it is."""
    if type(result) is not ndarray:
        return result
    plain = result.view(np.ndarray)
    for value in inputs:
        if isinstance(value, np.ndarray) and np.may_share_memory(plain, value):
            return result
    _written_later(plain, plain, None)
    return result


@contextlib.contextmanager
def _in_place(*targets: Any) -> Iterator[None]:
    """A device operation writing into ``targets`` (fake arrays): run at once, its values
    landing when the current stream runs (the targets hold their old values until then)."""
    plains = [t.view(np.ndarray) for t in targets]
    olds = [p.copy() for p in plains]
    yield
    for plain, old in zip(plains, olds, strict=True):
        _written_later(plain, plain, old)


def _device_count() -> int:
    return int(os.environ.get(GPUS_ENV, "1"))


@contextlib.contextmanager
def own_gpus(on: bool = True) -> Iterator[None]:
    """Within the block, each MPI rank's fake GPUs are physically its own (distinct PCI bus ids):
    what a transport decision made then sees is a GPU per rank, so NCCL can be chosen."""
    saved, _own[0] = _own[0], on
    try:
        yield
    finally:
        _own[0] = saved


def _bus_id(device: int) -> str:
    index = 0x17 + int(device)
    if _own[0]:
        from mpi4py import MPI

        index += MPI.COMM_WORLD.Get_rank() * _device_count()
    return f"0000:{index:02X}:00.0"


class ndarray(np.ndarray):
    """A "device" array: numpy memory, CuPy's type and methods, on a numbered fake device."""

    _device_id = 0

    def __array_finalize__(self, obj: Any) -> None:
        self._device_id = getattr(obj, "_device_id", _current_id())

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        arrays = [*inputs, *kwargs.get("out", ())]
        if any(type(a) is np.ndarray for a in arrays):  # CuPy refuses host arrays here
            raise TypeError(f"Unsupported type {np.ndarray} (fake cupy: a host array mixed in)")
        _touch()
        plain = [a.view(np.ndarray) if isinstance(a, ndarray) else a for a in inputs]
        outs = kwargs.get("out", ())
        if outs:
            kwargs["out"] = tuple(o.view(np.ndarray) for o in outs)
            with _in_place(*outs):
                getattr(ufunc, method)(*plain, **kwargs)
            return outs[0] if len(outs) == 1 else outs
        return _fresh(_wrap(getattr(ufunc, method)(*plain, **kwargs)), plain)

    @property
    def device(self) -> Device:
        return Device(self._device_id)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _touch()
        inputs = [*args, *kwargs.values()]
        out = kwargs.get("out")
        if isinstance(out, ndarray):
            with _in_place(out):
                return super().__array_function__(func, types, args, kwargs)
        result = super().__array_function__(func, types, args, kwargs)
        return _fresh(result, [a.view(np.ndarray) for a in inputs if isinstance(a, ndarray)])

    def __getitem__(self, key: Any) -> Any:
        _touch()
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        _touch()
        with _in_place(self):
            super().__setitem__(key, value)

    @property
    def data(self) -> Any:
        """CuPy's ``MemoryPointer``: taking ``ptr`` registers the allocation for the NCCL
        double (its extent, device and this array's dtype)."""
        return types.SimpleNamespace(ptr=fake_streams.register(self, self._device_id))

    def get(
        self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True
    ) -> Any:
        host = self.view(np.ndarray)
        if not blocking and out is not None:  # queued on that stream: lands when it runs
            queue = fake_streams.current_stream() if stream is None else stream
            fake_streams.enqueue(queue, lambda: np.copyto(out, host))
            return out
        # a copy on that stream (default: the current one of the array's device), after its work
        _touch(fake_streams.current_stream(self._device_id) if stream is None else stream)
        if out is None:
            return np.array(host, order=order)
        np.copyto(out, host)
        return out

    def set(self, arr: Any, stream: Any = None) -> None:
        if isinstance(arr, ndarray):
            raise TypeError("fake cupy: set() takes a host array")
        # queued on that stream (default: the current one), reading the host buffer when it
        # runs (CuPy's copy from pinned memory is asynchronous)
        target = self.view(np.ndarray)
        queue = fake_streams.current_stream() if stream is None else stream
        fake_streams.enqueue(queue, lambda: np.copyto(target, arr))

    def astype(
        self, dtype: Any, order: str = "K", casting: Any = None, copy: bool = True, **kw: Any
    ) -> Any:
        _touch()
        plain = self.view(np.ndarray)
        out = plain.astype(dtype, order=order, copy=copy)
        if out is plain:  # copy=False and nothing to convert: the array itself, as CuPy's
            return self
        return _fresh(_wrap(out, self._device_id), [plain])

    def copy(self, order: str = "C") -> Any:
        _touch()
        plain = self.view(np.ndarray)
        return _fresh(_wrap(plain.copy(order=order), self._device_id), [plain])

    def item(self, *args: Any) -> Any:
        _touch()
        return self.view(np.ndarray).item(*args)

    def tobytes(self, order: Any = "C") -> bytes:
        _touch()
        return self.view(np.ndarray).tobytes(order)

    def __repr__(self) -> str:  # CuPy's waits for the stream, as any read by the host does
        _touch(fake_streams.current_stream(self._device_id))
        return super().__repr__()

    def __str__(self) -> str:
        _touch(fake_streams.current_stream(self._device_id))
        return super().__str__()

    def __float__(self) -> float:
        _touch()
        return float(self.view(np.ndarray))

    def __int__(self) -> int:
        _touch()
        return int(self.view(np.ndarray))


def _wrap(result: Any, device: int | None = None) -> Any:
    """numpy results as device arrays (of ``device``, else the current one); a numpy scalar
    becomes a 0-d device array, as CuPy's reductions return."""
    if isinstance(result, np.generic):
        result = np.asarray(result)
    if type(result) is np.ndarray:
        out = result.view(ndarray)
        out._device_id = _current_id() if device is None else device
        return out
    if isinstance(result, tuple):
        return tuple(_wrap(r, device) for r in result)
    if isinstance(result, list):
        return [_wrap(r, device) for r in result]
    return result


def _host(value: Any) -> Any:
    if isinstance(value, ndarray):
        return value.view(np.ndarray)
    if isinstance(value, list | tuple):
        return type(value)(_host(v) for v in value)
    return value


class Device:
    """A fake CUDA device: a context manager making it current in this thread."""

    def __init__(self, device: int | None = None) -> None:
        self.id = _current_id() if device is None else int(device)
        if not 0 <= self.id < _device_count():
            raise RuntimeError(f"fake cupy: no device {self.id}")
        self._saved: list[int] = []

    def use(self) -> None:
        fake_streams.set_current_device(self.id)

    def synchronize(self) -> None:
        fake_streams.synchronize_device(self.id)

    def __enter__(self) -> Device:
        self._saved.append(_current_id())
        fake_streams.set_current_device(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        fake_streams.set_current_device(self._saved.pop())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return self.id


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    return module


class _Cupy(types.ModuleType):
    """``cupy``: numpy's functions, returning device arrays; ufuncs as numpy's."""

    def __getattr__(self, name: str) -> Any:
        found = getattr(np, name)
        if isinstance(found, np.ufunc) or not callable(found) or isinstance(found, type):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            _touch()
            out = kwargs.get("out")
            if out is not None:
                kwargs["out"] = out.view(np.ndarray)
                with _in_place(out):
                    found(*_host(args), **kwargs)
                return out
            plain = _host(args)
            return _fresh(_wrap(found(*plain, **kwargs)), _arrays_in(plain))

        return call


def _arrays_in(values: Any) -> list[np.ndarray]:
    """The arrays among ``values`` (nested in lists and tuples too)."""
    if isinstance(values, np.ndarray):
        return [values]
    if isinstance(values, list | tuple):
        return [a for v in values for a in _arrays_in(v)]
    return []


def _asarray(value: Any, dtype: Any = None) -> Any:
    _touch()
    if isinstance(value, ndarray) and value._device_id == _current_id():
        return value if dtype is None else value.astype(dtype, copy=False)
    return _fresh(_wrap(np.array(_host(value), dtype=dtype)), [])


def _array(value: Any, dtype: Any = None, copy: bool = True) -> Any:
    _touch()
    return _fresh(_wrap(np.array(_host(value), dtype=dtype, copy=True)), [])


def _copyto(dst: Any, src: Any, casting: str = "same_kind") -> None:
    if type(src) is np.ndarray:
        raise TypeError("fake cupy: copyto from a host array")
    _touch()
    with _in_place(dst):
        np.copyto(dst.view(np.ndarray), _host(src), casting=casting)


def _asnumpy(value: Any, stream: Any = None) -> Any:
    _touch(stream)
    return np.array(_host(value))


def _get_array_module(*args: Any) -> Any:
    return sys.modules["cupy"] if any(isinstance(a, ndarray) for a in args) else np


def _pinned(shape: Any, dtype: Any = float) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def install() -> types.ModuleType:
    """Puts the fake ``cupy``, ``cupy.cuda``, ``cupy.cuda.runtime``, ``cupy.cuda.nccl`` and
    ``cupyx`` in ``sys.modules`` (refusing to shadow a real CuPy); returns ``cupy``."""
    if "cupy" in sys.modules and not getattr(sys.modules["cupy"], "_mwms_fake", False):
        raise RuntimeError("a real CuPy is imported: no fake")
    runtime = _module(
        "cupy.cuda.runtime",
        getDeviceCount=_device_count,
        getDevice=_current_id,
        setDevice=lambda i: Device(i).use(),
        deviceGetPCIBusId=_bus_id,
        deviceSynchronize=lambda: fake_streams.synchronize_device(_current_id()),
    )
    nccl = _module("cupy.cuda.nccl", **fake_nccl.module_attributes())
    cuda = _module(
        "cupy.cuda",
        Device=Device,
        Event=Event,
        Stream=Stream,
        get_current_stream=lambda device_id=None: fake_streams.current_stream(device_id),
        runtime=runtime,
        nccl=nccl,
    )
    cupy = _Cupy("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cupy.__dict__.update(
        _mwms_fake=True,
        __version__="0.0-fake",
        ndarray=ndarray,
        cuda=cuda,
        asarray=_asarray,
        array=_array,
        copyto=_copyto,
        asnumpy=_asnumpy,
        get_array_module=_get_array_module,
        get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None),
        get_default_pinned_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None),
    )
    cupyx = _module("cupyx", empty_pinned=_pinned)
    sys.modules.update(
        {
            "cupy": cupy,
            "cupy.cuda": cuda,
            "cupy.cuda.runtime": runtime,
            "cupy.cuda.nccl": nccl,
            "cupyx": cupyx,
        }
    )
    return cupy
