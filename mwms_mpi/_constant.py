"""Python values to numpy arrays as ``tf.constant`` converts them: one rule for every layer.

Shared by the input pipeline (``data``) and the distributed values (``values``), which may not
import each other; it imports nothing from mwms_mpi.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_INT32 = np.iinfo(np.int32)
_INT64 = np.iinfo(np.int64)


def python_leaves(value: Any) -> list[Any]:
    """The leaves of nested lists and tuples, in order (``value`` itself if it is neither)."""
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in python_leaves(item)]
    return [value]


def to_array(value: Any) -> np.ndarray:
    """Converts ``value`` the way ``tf.constant`` does; numpy values keep their dtype.

    Python ``bool`` -> bool, ``int`` -> int32 (int64 if it does not fit), ``float`` -> float32,
    ``complex`` -> complex128, ``str``/``bytes`` -> bytes; nested lists alike, all leaves at once.

    Raises:
      ValueError: a ragged or mixed-type Python sequence, as ``tf.constant`` does.
      TypeError: a value with no array form.
    """
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    leaves = python_leaves(value)
    if any(isinstance(leaf, np.ndarray | np.generic) for leaf in leaves):
        try:
            return np.asarray(value)
        except ValueError:
            raise ValueError("Can't convert non-rectangular Python sequence to Tensor.") from None
    kinds = {_python_kind(leaf) for leaf in leaves}
    if len(kinds - {"int", "float", "complex"}) and len(kinds) > 1:
        raise ValueError("Can't convert Python sequence with mixed types to Tensor.")
    dtype: Any
    if kinds == {"bool"}:
        dtype = np.bool_
    elif kinds == {"str"}:
        dtype = np.bytes_
        value = _encode(value)
    elif "complex" in kinds:
        dtype = np.complex128
    elif "float" in kinds:
        dtype = np.float32
    elif kinds <= {"int"}:  # an empty list is float32 in TF
        ints = [int(leaf) for leaf in leaves]
        if not ints:
            dtype = np.float32
        elif all(_INT32.min <= v <= _INT32.max for v in ints):
            dtype = np.int32
        elif all(_INT64.min <= v <= _INT64.max for v in ints):
            dtype = np.int64
        else:
            raise ValueError(f"Can't convert Python int {max(ints, key=abs)} to a Tensor.")
    else:
        raise TypeError(f"Failed to convert elements of {value!r} to Tensor.")
    try:
        return np.asarray(value, dtype=dtype)
    except ValueError:
        raise ValueError("Can't convert non-rectangular Python sequence to Tensor.") from None


def _python_kind(leaf: Any) -> str:
    if isinstance(leaf, bool):
        return "bool"
    if isinstance(leaf, int):
        return "int"
    if isinstance(leaf, float):
        return "float"
    if isinstance(leaf, complex):
        return "complex"
    if isinstance(leaf, str | bytes):
        return "str"
    return "other"


def _encode(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    return value.encode() if isinstance(value, str) else value
