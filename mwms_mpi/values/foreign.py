"""Arrays from other libraries (JAX, PyTorch, anything with ``__array__`` or ``__dlpack__``).

Gradients and losses computed by an autodiff library reach mwms_mpi as that library's arrays.
They become numpy arrays (CuPy arrays for device memory, where CuPy is imported) at the one
conversion home, ``values/convert.py``, which asks here; the collectives, the agreement and
the variables then only ever see numpy or CuPy. Nothing here imports a library: an array of a
library can only exist once that library is imported, so ``sys.modules`` is asked first
(as ``_arrays`` does for CuPy), and a numpy program pays nothing.

A JAX *tracer* (what ``jax.jit`` hands a function while tracing it) has no value yet: turning
it into an array fails deep inside (``merge_call`` receives tracers), and a variable read while
tracing would be frozen into the compiled function. Both are refused here with the fix.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np

from mwms_mpi import _arrays

__all__ = [
    "array_namespace",
    "from_foreign",
    "is_foreign_array",
    "is_jax_tracer",
    "not_traced",
    "raise_if_jit_tracing",
]

_DLPACK_CUDA = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged: memory CuPy can take

JIT_FIX = (
    "mwms_mpi cannot run inside a jax.jit (or other JAX) trace: there is no value to "
    "communicate or store while tracing, and a variable read there would be frozen into the "
    "compiled function. jit only the pure loss-and-gradient function (parameters in, loss and "
    "gradients out) and call mwms_mpi (apply_gradients, strategy.reduce, all_reduce, variable "
    "reads and assigns) outside it, on its results."
)


def is_jax_tracer(value: Any) -> bool:
    """Whether ``value`` is a JAX tracer (never imports JAX)."""
    if "jax" not in sys.modules:
        return False
    core = sys.modules.get("jax.core")
    tracer = getattr(core, "Tracer", None)
    return tracer is not None and isinstance(value, tracer)


def _jit_tracing() -> bool:
    """Whether JAX is tracing a ``jax.jit`` function right now (never imports JAX).

    JAX has no public question for this: outside any transformation its trace context is
    at top level (the cheap answer, asked on every variable read once JAX is imported); inside
    one, its own ``unsafe_am_i_under_a_jit`` tells ``jit`` from ``grad``. A JAX without these
    is assumed not to be tracing (no check, as before).
    """
    if "jax" not in sys.modules:
        return False
    core = sys.modules.get("jax._src.core")
    top_level = getattr(getattr(core, "trace_ctx", None), "is_top_level", None)
    if callable(top_level) and top_level():
        return False
    probe = getattr(core, "unsafe_am_i_under_a_jit", None)
    return bool(probe()) if callable(probe) else False


def raise_if_jit_tracing(api: str) -> None:
    """Refuses a variable read (``api``) while ``jax.jit`` traces: it would be frozen.

    Raises:
      ValueError: while a ``jax.jit`` trace is in progress, naming ``api`` and the fix.
    """
    if _jit_tracing():
        raise ValueError(f"`{api}` was called while jax.jit traces a function. {JIT_FIX}")


def not_traced(value: Any) -> Any:
    """``value`` itself, unless it is a JAX tracer (arithmetic of a variable with one).

    Raises:
      ValueError: for a JAX tracer, naming the fix.
    """
    if is_jax_tracer(value):
        _refuse_tracer(value)
    return value


def _refuse_tracer(value: Any) -> None:
    raise ValueError(
        f"Attempt to convert a value ({type(value).__name__} of shape "
        f"{getattr(value, 'shape', '?')}, dtype {getattr(value, 'dtype', '?')}) with an "
        f"unsupported type ({type(value)}) to a Tensor: it is a JAX tracer. {JIT_FIX}"
    )


def is_foreign_array(value: Any) -> bool:
    """Whether ``value`` is another library's array: not numpy or CuPy, but with
    ``__array__`` or ``__dlpack__`` (a JAX tracer counts: it is refused on conversion).

    mwms_mpi's own types (variables, ``PerReplica``, ``Mirrored``, ``IndexedSlices``) have
    ``__array__`` for ``np.asarray`` but keep their own conversion rules: they are not foreign.
    """
    if isinstance(value, np.ndarray | np.generic) or _arrays.is_device_array(value):
        return False
    kind = type(value)
    if not (hasattr(kind, "__array__") or hasattr(kind, "__dlpack__")):
        return False
    return not kind.__module__.startswith("mwms_mpi.")


def _dlpack_on_gpu(value: Any) -> bool:
    """Whether ``value`` is in memory CuPy can take (asked by DLPack; never by ``__dlpack__``
    alone, which is not required of a library that also gives ``__array__``)."""
    device = getattr(value, "__dlpack_device__", None)
    if device is None or not hasattr(value, "__dlpack__"):
        return False
    try:
        return int(device()[0]) in _DLPACK_CUDA
    except Exception:  # a library whose __dlpack_device__ fails has no device array to give
        return False


def from_foreign(value: Any) -> Any:
    """A numpy (or CuPy) array of another library's array, without a copy where it allows.

    Host memory goes through ``np.asarray`` (a zero-copy view where the library allows it:
    JAX on CPU hands a read-only view of its immutable buffer), always as a new array object.
    Device memory goes to CuPy by DLPack where CuPy is imported; without CuPy, through the
    library's ``__array__`` (JAX copies to the host), and refused where it has none or it
    fails (a CUDA torch tensor). An object with ``__dlpack__`` alone is read by
    ``np.from_dlpack`` on the host. The dtype is the library's, as for a numpy array.

    Raises:
      ValueError: for a JAX tracer (see :data:`JIT_FIX`), or a device array that neither CuPy
        nor the library's ``__array__`` can take.
    """
    if is_jax_tracer(value):
        _refuse_tracer(value)
    cp = _arrays.cupy_if_imported()
    # where the memory is matters only with CuPy to take it, or for the error: asked then
    # (JAX's __dlpack_device__ costs more than the host view itself)
    if cp is not None and _dlpack_on_gpu(value):
        return cp.from_dlpack(value)
    if hasattr(value, "__array__"):
        try:
            # A view: each foreign value is its own array object even when ``__array__``
            # hands back one shared array (replicas' values must not merge as one value),
            # and its library's array object is never the one the caller gets back.
            return np.asarray(value).view()
        except (TypeError, RuntimeError) as error:
            if not _dlpack_on_gpu(value):
                raise
            _refuse_device(value, error)
    if _dlpack_on_gpu(value):
        _refuse_device(value, None)
    return np.from_dlpack(value)


def _refuse_device(value: Any, cause: BaseException | None) -> None:
    raise ValueError(
        f"Attempt to convert a value ({type(value)}) in GPU memory to a Tensor: device arrays "
        "are taken through CuPy (import cupy first), or pass a host array."
    ) from cause


def array_namespace(*values: Any) -> types.ModuleType:
    """The array-API namespace to compute on ``values`` with, without leaving their library.

    ``x.__array_namespace__()`` where an input has it (JAX arrays and tracers, array-API
    libraries), ``jax.numpy`` for a JAX array or tracer, CuPy for a CuPy array, else numpy:
    what lets a helper on a loss (``nn.compute_average_loss``) run inside ``jax.grad``.
    """
    for value in values:
        if _arrays.is_device_array(value):  # first: the test suites' CuPy stand-in is a numpy
            return _arrays.array_module(value)  # subclass, and must take CuPy's path here
        if isinstance(value, np.ndarray | np.generic):
            continue
        namespace = getattr(value, "__array_namespace__", None)
        if namespace is not None:
            return namespace()
        if is_jax_tracer(value) or type(value).__module__.startswith("jax"):
            return sys.modules["jax.numpy"]
    return np
