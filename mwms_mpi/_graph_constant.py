"""Values converted as TF converts them inside a ``tf.function`` (graph mode), where TF does so.

TF 2.21 runs one API of ours in a ``tf.function``: ``Strategy.reduce("SUM", value, axis)``
traces ``reduce_sum`` once per axis. A graph converts differently from eager TF:

1. The function's arguments: numpy arrays *and numpy scalars* anywhere in the nest become
   tensors of their dtype (placeholders); Python numbers stay Python values
   (:func:`function_arguments`).
2. A list or tuple holding a tensor is packed by TF's autopacking without the eager fast path
   (``_autopack.pack(..., graph=True)``).
3. Any other Python value is a graph constant, built by ``make_tensor_proto``: numpy's own
   conversion (``np.array(value)``, numpy's promotion), float64 made float32 and int64 made
   int32 where no value changes; with a dtype, every leaf must be of its kind first
   (``_AssertCompatible``). So ``[True, 0]`` is int32 there, where eager TF refuses it.

Imports ``_constant`` and ``_autopack`` only (layer 0).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from mwms_mpi import _autopack
from mwms_mpi._constant import python_leaves, to_array
from mwms_mpi._tf_text import tf_api_dtype_name

# The leaf types ``_AssertCompatible`` accepts for a requested dtype's kind (TF's
# ``_check_int``/``_check_float``/``_check_complex``/``_check_bool``/``_check_str``).
_KIND_TYPES: dict[str, tuple[type, ...]] = {
    "i": (numbers.Integral, np.integer),
    "u": (numbers.Integral, np.integer),
    "f": (numbers.Real, np.integer, np.floating),
    "c": (numbers.Complex, np.number),
    "b": (bool,),
    "S": (bytes, str),
}


def function_arguments(value: Any) -> Any:
    """A ``tf.function``'s argument as the traced function sees it: numpy scalars in lists,
    tuples and dicts are tensors (0-d arrays here); everything else is itself."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, dict):
        return {key: function_arguments(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(function_arguments(item) for item in value)
    return value


def graph_array(value: Any, dtype: Any = None) -> np.ndarray:
    """``tf.convert_to_tensor(value, dtype)`` inside a ``tf.function`` (module docstring).

    Raises:
      TypeError: a leaf of another kind than ``dtype``, a value numpy makes an object array
        of, or TF's autopacking errors (TF's messages).
      ValueError: a ragged nest (numpy's message, wrapped as TF's op wraps it), ``None``.
    """
    if isinstance(value, np.ndarray | np.generic):
        return to_array(value, dtype)
    if isinstance(value, list | tuple) and _autopack.packed_dtype(value) is not None:
        return _autopack.pack(value, dtype, graph_array, graph=True)
    return _tensor_proto(value, None if dtype is None else np.dtype(dtype))


def _tensor_proto(value: Any, dtype: np.dtype | None) -> np.ndarray:
    """TF's ``make_tensor_proto`` of a Python value: numpy converts it."""
    if value is None:
        raise ValueError("None values not supported.")
    if dtype is not None:
        accepted = _KIND_TYPES.get(dtype.kind, ())
        for leaf in python_leaves(value) if accepted else []:
            if not isinstance(leaf, accepted):
                raise TypeError(
                    f"Expected {tf_api_dtype_name(dtype)}, but got {leaf} of type "
                    f"'{type(leaf).__name__}'."
                )
    try:
        with np.errstate(all="ignore"):
            array = np.array(value)
            if dtype is not None and dtype.kind in "iufc":  # TF's np_array: wraps, as astype
                array = array.astype(dtype)
            elif dtype is not None and dtype.kind == "b":
                array = np.array(value, dtype=dtype)
    except ValueError as exc:  # ragged: TF's op wraps numpy's message
        raise ValueError(f"Tried to convert 'input' to a tensor and failed. Error: {exc}") from None
    if array.dtype.kind == "O":
        raise TypeError(
            f"Failed to convert elements of {value} to Tensor. Consider casting elements to a "
            "supported type. See https://www.tensorflow.org/api_docs/python/tf/dtypes for "
            "supported TF dtypes."
        )
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8")
    if dtype is None and array.dtype == np.float64:
        with np.errstate(over="ignore"):
            return array.astype(np.float32)
    if dtype is None and array.dtype == np.int64:
        narrow = array.astype(np.int32)
        return narrow if np.array_equal(narrow, array) else array
    return array
