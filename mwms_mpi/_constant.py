"""Python values to numpy arrays as ``tf.constant`` converts them: one rule for every layer.

Shared by the input pipeline (``data``) and the distributed values (``values``), which may not
import each other; from mwms_mpi it imports only ``_autopack`` (a list or tuple holding an
array is packed as TF packs one holding a tensor, docs/architecture.md "Arrays are tensors")
and ``_tf_text`` (TF's names in messages).

A Python sequence follows TF's ``py_seq_tensor.cc`` exactly (numpy's promotion is *not* TF's):

1. The shape and the *inferred kind* come from the first leaf alone (depth-first, first
   element of each level; 0-d arrays count as their scalar): ``numpy.float64`` -> double,
   ``numpy.float16`` -> half, another float -> float, ``bool``/``numpy.bool_`` -> bool, another
   integer -> int, complex -> complex, ``str``/``bytes`` -> string, an empty level -> none.
2. Every leaf is then converted by that kind's element converter (``_ELEMENT``), which accepts
   Python ints (``True`` included) and numpy integers wherever a float is wanted, refuses a
   numpy bool there, and stops at the first leaf it cannot take.
3. Kinds map to dtypes: double -> float64, half -> float16, float -> float32, int -> int32,
   falling back to int64 at the first leaf outside int32 and to float32 at the first float leaf
   (so ``[np.int64(2), 1]`` is int32, ``[np.float32(1), 2.5]`` float32 and ``[1, np.float64(2.5)]``
   float32), complex -> complex128, bool -> bool, string -> bytes, none -> float32 (empty).
4. With a requested dtype (``convert_to_tensor(value, dtype)``) that dtype's converter is tried
   first; otherwise the inferred conversion runs (ints to int64, floats to float64) and its
   result is cast when TF deems the two compatible (integer to integer or wider family), else
   ``TypeError("Cannot convert ... to EagerTensor of dtype ...")``.

A list or tuple holding a numpy array anywhere in its nest is not converted by this rule but
packed (``_autopack.py``): the arrays are tensors, so ``[x]`` keeps ``x``'s dtype.

numpy arrays (any ``ndarray`` subclass, taken as its plain-``ndarray`` view as TF's
``__array__`` call does) keep their dtype, in native byte order; object arrays are refused with
TF's message and unicode arrays become bytes (TF's ``tf.string``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import _autopack
from mwms_mpi._tf_text import tf_dtype_name

_RECTANGULAR = "Can't convert non-rectangular Python sequence to Tensor."
_MIXED = "Can't convert Python sequence with mixed types to Tensor."
_OUT_OF_RANGE = "Can't convert Python sequence with out-of-range integer to Tensor."
_OUT_OF_RANGE_DOUBLE = (
    "Can't convert Python sequence with a value out of range for a double-precision float."
)
_FOUND_INT64 = "Can't convert Python sequence with out-of-range integer to int32 Tensor."
_FOUND_FLOAT = "Can't convert Python sequence with floating point values to integer Tensor."
_UNICODE = "Error converting unicode string while converting Python sequence to Tensor."


# The dtypes a numpy array keeps as it is (native byte order, bool and numbers): a set, so
# that the check on every array an API takes in is one lookup.
NATIVE_NUMBERS = frozenset(np.dtype(code) for code in "?bBhHiIlLqQefdgFDG")


class _Fail(Exception):
    """An element converter's refusal, carrying TF's message (which decides the fallback)."""


def python_leaves(value: Any) -> list[Any]:
    """The leaves of nested lists and tuples, in order (``value`` itself if it is neither)."""
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in python_leaves(item)]
    return [value]


def ndarray_value(array: np.ndarray) -> np.ndarray:
    """A numpy array as TF takes it: itself when it is a plain native-order numeric array.

    Subclasses (``np.memmap``, ``np.ma.MaskedArray`` -- its data, mask ignored --, ``np.matrix``)
    become their plain ``ndarray`` view, as TF's ``__array__`` call makes them; non-native byte
    order is swapped to native (TF's tensors are native); unicode becomes UTF-8 bytes.

    Raises:
      ValueError: for an object array, with TF's message (TF has no object dtype).
    """
    if type(array) is not np.ndarray:
        array = np.asarray(array).view(np.ndarray)
    dtype = array.dtype
    if dtype.kind == "O":
        first = array.flat[0] if array.size else None
        raise ValueError(
            "Failed to convert a NumPy array to a Tensor (Unsupported object type "
            f"{type(first).__name__})."
        )
    if dtype.kind == "U":
        return np.char.encode(array, "utf-8")
    if not dtype.isnative:
        return array.astype(dtype.newbyteorder("="))
    return array


def to_array(value: Any, dtype: Any = None, name: str = "packed") -> np.ndarray:
    """Converts ``value`` the way ``tf.convert_to_tensor(value, dtype)`` does (module docstring).

    numpy arrays and scalars keep their dtype unless ``dtype`` is given (then they are cast, as
    TF casts numpy input); Python values and sequences follow TF's sequence rule. ``name`` is
    ``convert_to_tensor``'s: TF's ``Pack`` errors for a list holding arrays end with it
    (``initial_value`` for a variable, ``component_0`` for a dataset's first component).

    Raises:
      ValueError: TF's conversion errors (ragged or mixed sequences, out-of-range numbers,
        object arrays, unsupported leaves).
      TypeError: a requested ``dtype`` that TF will not convert the Python value to.
    """
    if isinstance(value, np.ndarray):
        array = ndarray_value(value) if dtype is None or value.dtype.kind != "O" else value
        return array if dtype is None else array.astype(dtype)
    if isinstance(value, np.generic):
        return np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    if isinstance(value, list | tuple) and _autopack.packed_dtype(value) is not None:
        return _autopack.pack(value, dtype, to_array, name=name)  # arrays are tensors
    requested = None if dtype is None else np.dtype(dtype)
    shape, kind = _infer(value)
    if requested is not None:
        converter = _REQUESTED.get(requested)
        if converter is not None:
            try:
                return _convert(value, shape, converter, requested)
            except _Fail:
                pass
    result = _inferred(value, shape, kind, requested)
    if requested is None or result.dtype == requested:
        return result
    if not _compatible(requested, result.dtype):
        name = tf_dtype_name(requested)
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {name}")
    with np.errstate(all="ignore"):
        return result.astype(requested)


def _zero_dim(obj: Any) -> Any:
    if isinstance(obj, np.ndarray) and obj.ndim == 0:
        return obj[()]
    return obj


def _is_sequence(obj: Any) -> bool:
    """A level of the nest: a list, a tuple, or an array inside one (only an object array
    reaches here: a list holding another array is packed, ``_autopack.py``)."""
    return isinstance(obj, list | tuple | np.ndarray)


def _infer(value: Any) -> tuple[list[int], str]:
    """TF's ``InferShapeAndType``: the shape and the kind of the first leaf."""
    shape: list[int] = []
    obj = value
    while True:
        obj = _zero_dim(obj)
        if isinstance(obj, str | bytes):
            return shape, "string"
        if _is_sequence(obj):
            shape.append(len(obj))
            if not len(obj):
                return shape, "none"
            obj = obj[0]
            continue
        if isinstance(obj, np.float64):
            return shape, "double"
        if isinstance(obj, np.float16):
            return shape, "half"
        if isinstance(obj, float | np.floating):
            return shape, "float"
        if isinstance(obj, bool | np.bool_):
            return shape, "bool"
        if isinstance(obj, int | np.integer):
            return shape, "int"
        if isinstance(obj, complex | np.complexfloating):
            return shape, "complex"
        raise ValueError(
            f"Attempt to convert a value ({obj!r}) with an unsupported type ({type(obj)!r}) to a "
            "Tensor."
        )


def _convert(value: Any, shape: list[int], element: Callable[[Any], Any], dtype: Any) -> Any:
    """Fills an array of ``shape`` with ``element(leaf)`` for every leaf (TF's ``Helper``)."""
    bulk = _bulk(value, shape, element, dtype)
    if bulk is not None:
        return bulk
    out: list[Any] = []
    if not shape:
        out.append(element(_zero_dim(value)))
    elif math.prod(shape):
        _fill(value, shape, 0, element, out)
    with np.errstate(over="ignore"):  # an int too large for the float dtype is inf in TF too
        return np.array(out, dtype=dtype).reshape(shape)


def _bulk(value: Any, shape: list[int], element: Callable[[Any], Any], dtype: Any) -> Any:
    """numpy's own conversion, where it is the element converter's for every leaf: leaves all
    Python floats for a float converter, all Python ints for an int one, all bools for bool,
    and a rectangular nest of ``shape``; else ``None`` (the leaf-by-leaf path decides, with
    TF's errors). A long list converts at numpy's speed, not a Python call per leaf.

    Raises:
      _Fail: TF's messages for a float beyond the float dtype, an int beyond int32.
    """
    if not shape:
        return None
    kinds = {type(leaf) for leaf in python_leaves(value)}
    if element in (_float, _half, _double) and kinds == {float}:
        source: Any = np.float64
    elif element in (_int32, _int64) and kinds == {int}:
        source = np.int64
    elif element is _bool and kinds == {bool}:
        source = np.bool_
    else:
        return None
    try:
        array = np.array(value, dtype=source)
    except (ValueError, OverflowError):  # ragged, or an int beyond int64: TF's errors below
        return None
    if list(array.shape) != shape:
        return None
    if source is np.float64 and dtype != np.float64:
        with np.errstate(over="ignore"):
            narrow = array.astype(dtype)
        if bool((np.isinf(narrow) & np.isfinite(array)).any()):
            raise _Fail(_OUT_OF_RANGE_DOUBLE)
        return narrow
    if element is _int32 and bool(((array < -(2**31)) | (array >= 2**31)).any()):
        raise _Fail(_FOUND_INT64)
    return array.astype(dtype, copy=False)


def _fill(
    obj: Any, shape: list[int], depth: int, element: Callable[[Any], Any], out: list[Any]
) -> None:
    if not _is_sequence(obj) or len(obj) != shape[depth]:
        raise _Fail(_RECTANGULAR)
    if depth + 1 < len(shape):
        for item in obj:
            _fill(item, shape, depth + 1, element, out)
    else:
        out.extend(element(_zero_dim(item)) for item in obj)


def _inferred(value: Any, shape: list[int], kind: str, requested: np.dtype | None) -> Any:
    """TF's conversion by inferred kind, with its int32 -> int64 -> float32 fallbacks."""
    try:
        if kind == "none":
            return np.zeros(shape, dtype=requested if requested is not None else np.float32)
        if kind == "int":
            if requested is not None:
                try:
                    return _convert(value, shape, _int64, np.int64)
                except _Fail as fail:
                    if str(fail) != _FOUND_FLOAT:
                        raise
                    return _convert(value, shape, _double, np.float64)
            try:
                return _convert(value, shape, _int32, np.int32)
            except _Fail as fail:
                if str(fail) == _FOUND_INT64:
                    try:
                        return _convert(value, shape, _int64, np.int64)
                    except _Fail as again:
                        fail = again
                if str(fail) != _FOUND_FLOAT:
                    raise fail from None
                return _convert(value, shape, _float, np.float32)
        if kind == "float" and requested is not None:
            kind = "double"  # TF keeps full precision for the cast that follows
        element, dtype = _BY_KIND[kind]
        return _convert(value, shape, element, dtype)
    except _Fail as fail:
        raise ValueError(str(fail)) from None


def _compatible(desired: np.dtype, returned: np.dtype) -> bool:
    """TF's ``IsCompatible``: may the inferred result be cast to the requested dtype?"""
    if desired.kind in "iu":
        return returned.kind in "iu"
    if desired.kind == "f":
        return returned.kind in "iuf"
    if desired.kind == "c":
        return returned.kind in "iufc"
    return desired == returned


# -- TF's element converters (ConvertScalar): a value, or _Fail with TF's message ---------------


def _int64(v: Any) -> int:
    if isinstance(v, int):  # PyLong_Check: bools and int subclasses too
        if not -(2**63) <= v < 2**63:
            raise _Fail(_OUT_OF_RANGE)
        return int(v)
    if isinstance(v, np.integer):
        return _int64(int(v))
    raise _Fail(_FOUND_FLOAT if isinstance(v, float | np.floating) else _MIXED)


def _int32(v: Any) -> int:
    i = _int64(int(v) if isinstance(v, np.integer) else v)
    if not -(2**31) <= i < 2**31:
        raise _Fail(_FOUND_INT64)
    return i


def _uint64(v: Any) -> int:
    """TF leaves a pending Python error (a ``SystemError``) for a negative or too large int;
    it is TF's out-of-range ``ValueError`` here, not a wrapped value."""
    i = int(v) if isinstance(v, int | np.integer) else _int64(v)
    if not 0 <= i < 2**64:
        raise ValueError(_OUT_OF_RANGE)
    return i


def _to_float(v: Any, target: type[np.floating[Any]]) -> float:
    """TF's ``ConvertOneFloat``: a finite float that overflows ``target`` is an error; an int
    is cast without that check (TF's ``static_cast``), unless it overflows a double."""
    if isinstance(v, float):  # PyFloat_Check: numpy.float64 and float subclasses too
        if target is not np.float64 and math.isfinite(v):
            with np.errstate(over="ignore"):
                if np.isinf(target(v)):
                    raise _Fail(_OUT_OF_RANGE_DOUBLE)
        return float(v)
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:
            raise _Fail(_OUT_OF_RANGE_DOUBLE) from None
    if isinstance(v, np.floating):
        return _to_float(float(v), target)
    if isinstance(v, np.integer):
        return _to_float(int(v), target)
    raise _Fail(_MIXED)


def _float(v: Any) -> float:
    return _to_float(v, np.float32)


def _half(v: Any) -> float:
    return _to_float(v, np.float16)


def _double(v: Any) -> float:
    return _to_float(v, np.float64)


def _complex(v: Any) -> complex:
    if isinstance(v, complex | np.complexfloating):
        return complex(v)
    return complex(_double(v), 0.0)


def _bool(v: Any) -> bool:
    if v is True or v is False or isinstance(v, np.bool_):
        return bool(v)
    raise _Fail(_MIXED)


def _string(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError:
            raise _Fail(_UNICODE) from None
    raise _Fail(_MIXED)


_BY_KIND: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "double": (_double, np.float64),
    "half": (_half, np.float16),
    "float": (_float, np.float32),
    "complex": (_complex, np.complex128),
    "bool": (_bool, np.bool_),
    "string": (_string, np.bytes_),
}
_REQUESTED: dict[np.dtype, Callable[[Any], Any]] = {
    np.dtype(np.float32): _float,
    np.dtype(np.float64): _double,
    np.dtype(np.float16): _half,
    np.dtype(np.int64): _int64,
    np.dtype(np.int32): _int32,
    np.dtype(np.uint64): _uint64,
    np.dtype(np.complex128): _complex,
    np.dtype(np.bool_): _bool,
}
