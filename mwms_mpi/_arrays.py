"""Host (numpy) and device (CuPy) arrays told apart without importing CuPy: one rule everywhere.

A CuPy array can only exist once ``cupy`` has been imported, so ``sys.modules`` answers "is
this a device array" for free, never importing it (``import mwms_mpi`` does not either; when a
communicator imports it: docs/gpus.md, "Installing"). Every layer that must treat an array by
its kind (the collectives, the values, the optimizers, checkpoints) asks here, and writes its
arithmetic once against :func:`array_module` of its inputs.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np

HOST = "numpy"
DEVICE = "cupy"


def cupy_if_imported() -> types.ModuleType | None:
    """The ``cupy`` module if something imported it already, else ``None`` (never imports)."""
    return sys.modules.get("cupy")


def is_device_array(value: Any) -> bool:
    """Whether ``value`` is a CuPy array (on a GPU)."""
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(value, cp.ndarray)


def kind(value: Any) -> str:
    """``"cupy"`` for a device array, else ``"numpy"`` (what error messages and layouts name)."""
    return DEVICE if is_device_array(value) else HOST


def array_module(*values: Any) -> types.ModuleType:
    """``cupy`` if any of ``values`` is a device array, else ``numpy`` (as CuPy's own
    ``get_array_module``)."""
    cp = sys.modules.get("cupy")
    if cp is not None:
        for v in values:
            if isinstance(v, cp.ndarray):
                return cp
    return np


def to_host(value: Any) -> Any:
    """A numpy array of a device array's value (a copy); anything else unchanged."""
    if is_device_array(value):
        return value.get()
    return value


def like(value: Any, reference: Any) -> Any:
    """``value`` where ``reference`` lives: on ``reference``'s GPU if it is a device array (a
    copy there, unless ``value`` is already on it), on the host if it is not (a copy of a
    device ``value``). What a variable does with an assigned value (TF copies it to the
    variable's device), and where a result computed on the host goes back to."""
    if is_device_array(reference):
        device = reference.device
        if is_device_array(value) and value.device == device:
            return value
        return onto(value, device)
    if is_device_array(value):
        return value.get()
    return value


def onto(value: Any, device: Any) -> Any:
    """A copy of ``value`` (host or device) on the CUDA ``device``: the one home of copies
    between GPUs.

    A copy made under the destination device runs on the destination's current stream, which
    CUDA does not order after the work queued on the source GPU (the kernel or collective that
    wrote ``value`` may not have run yet). So an event recorded on the source's current stream
    is waited for by the destination's first, and the source's stream then waits for the copy,
    so that the source's memory pool cannot hand ``value``'s memory to new work before the copy
    has read it. Both streams are the calling thread's: with CUDA's legacy default stream (the
    only mode a strategy on GPUs accepts, ``distribute/gpus.py``) a replica thread's work on a
    device is on that same stream.
    """
    cp = sys.modules["cupy"]
    if not is_device_array(value):
        with device:
            return cp.array(value)  # from the host: ordered on the destination's stream
    with value.device:
        source = cp.cuda.get_current_stream()
        written = source.record()
    with device:
        target = cp.cuda.get_current_stream()
        target.wait_event(written)
        out = cp.array(value)
        read = target.record()
    source.wait_event(read)
    return out


def as_result(value: Any) -> Any:
    """``value`` as an array of its own kind: a device array as it is, anything else through
    ``np.asarray`` (what ``np.asarray(result)`` did before device arrays: it would copy a CuPy
    result to the host, or fail)."""
    if is_device_array(value):
        return value
    return np.asarray(value)


def array_copy(value: Any, dtype: Any = None) -> Any:
    """A fresh array of ``value`` (optionally cast to ``dtype``), of the same kind and device."""
    if is_device_array(value):
        return value.astype(value.dtype if dtype is None else dtype, copy=True)
    return np.array(value, dtype=dtype, copy=True)


def as_dtype(value: Any, dtype: Any) -> Any:
    """``value`` as an array of ``dtype`` of its own kind, copied only to change the dtype."""
    if is_device_array(value):
        return value.astype(dtype, copy=False)
    return np.asarray(value, dtype=dtype)


def native_dtype(dtype: Any) -> np.dtype[Any]:
    """``dtype`` in this machine's byte order: the one home of the byte-order rule.

    MPI, the exact sums' bit tricks, TF's dtype lists and a checkpoint's ``.npy`` members all
    take a dtype by its native layout, so a foreign-order (``>f4`` on a little-endian host)
    value is made native wherever it comes in. A native or one-byte dtype comes back as the
    same object (no new dtype on the hot path); a dtype-like (``">f8"``, ``np.float32``) is
    parsed first.
    """
    d = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    return d if d.isnative else d.newbyteorder("=")


def native_array(array: Any) -> Any:
    """``array`` itself if its dtype is native, else a native-order copy of the same values
    (what a checkpoint saves, and what the collectives hand to MPI)."""
    if array.dtype.isnative:
        return array
    return array.astype(native_dtype(array.dtype))
