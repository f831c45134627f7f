"""Values to numpy arrays the way ``tf.constant``/``convert_to_tensor`` convert them (no MPI)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi._constant import NATIVE_NUMBERS, ndarray_value, to_array
from mwms_mpi._tf_text import tensor_repr
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.foreign import from_foreign, is_foreign_array
from mwms_mpi.values.indexed_slices import IndexedSlices

# Bounds inside which a Python number converts as its plain numpy cast (beyond them,
# ``_constant.to_array`` decides: int64, or TF's out-of-range error)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_SCALARS = frozenset({int, float, bool, complex, str, bytes})  # no variable inside


def as_array(value: Any, name: str = "packed") -> Any:
    """Converts a value the way ``tf.constant`` does; numpy (and CuPy) arrays pass unchanged.

    Python numbers, strings and (nested) lists follow TF's rule, in ``mwms_mpi/_constant.py``:
    floats become float32, ints int32 (int64 when out of range), bools bool, ``str``/``bytes``
    bytes (TF's ``tf.string``), and a list's dtype comes from its first element; numpy scalars
    become 0-d arrays of their dtype; a numpy array is itself unless it must change to be a TF
    value (a subclass, non-native byte order, unicode; object arrays are refused); a variable is
    read (a fresh array). Another library's array (``__array__`` or ``__dlpack__``: JAX,
    PyTorch) becomes a numpy array of its dtype, a zero-copy view where the library allows it,
    or a CuPy array for device memory (``values/foreign.py``): this is where every API takes
    values in.

    Raises:
      ValueError: for values that are not numbers, strings or arrays (TF's conversion error),
        and for a JAX tracer (an mwms_mpi call inside ``jax.jit``), naming the fix.
    """
    kind = type(value)
    if kind is np.ndarray:  # the hot path: a native numeric array is itself
        return value if value.dtype in NATIVE_NUMBERS else ndarray_value(value)
    if kind is IndexedSlices:
        return value
    # Python scalars that TF's rule converts without a question (the common case, fast)
    if kind is float and -_FLOAT32_MAX < value < _FLOAT32_MAX:
        return np.array(value, dtype=np.float32)
    if kind is int and _INT32_MIN <= value <= _INT32_MAX:
        return np.array(value, dtype=np.int32)
    if kind is bool:
        return np.array(value, dtype=np.bool_)
    if _arrays.is_device_array(value):  # before the ndarray subclasses: stays on its device
        return value
    if isinstance(value, list | tuple):
        return to_array(read_variables(value), name=name)  # name: TF's Pack errors end with it
    if isinstance(value, np.ndarray | np.generic | int | float | complex | str | bytes):
        # bools, int and float subclasses (IntEnum) included, as in TF; a string is TF's
        # tf.string (bytes; unicode encoded as UTF-8), which the kernels then refuse or keep
        return to_array(value)
    if isinstance(value, VariableBase):
        return value.read_value()
    if is_foreign_array(value):
        array = from_foreign(value)
        return array if _arrays.is_device_array(array) else ndarray_value(array)
    raise ValueError(
        f"Attempt to convert a value ({value!r}) with an unsupported type ({type(value)}) to a "
        "Tensor."
    )


def read_variables(value: Any) -> Any:
    """A nest of lists and tuples with its variables read (itself when it has none): in TF a
    variable in a list is a tensor that the list packs (``[v]`` of an int64 ``v`` is int64,
    ``_autopack.py``)."""
    if isinstance(value, VariableBase):
        return value.read_value()
    if isinstance(value, list | tuple) and not set(map(type, value)) <= _SCALARS:
        items = [read_variables(item) for item in value]
        if any(new is not old for new, old in zip(items, value, strict=True)):
            return type(value)(items) if type(value) in (list, tuple) else items
    return value


def result_copy(value: Any) -> Any:
    """A result that TF gives back unchanged (the default strategy's ``reduce``, ``gather``,
    ``all_reduce``): an array becomes a fresh numpy (or CuPy) array, another library's too,
    since a tensor is immutable and an array is not (docs/architecture.md: a result never
    aliases the caller's array, and is never the other library's); other values (a variable,
    ``IndexedSlices``, a Python number) are returned as they are, as TF returns them."""
    if is_foreign_array(value):
        value = as_array(value)
    if isinstance(value, np.ndarray) or _arrays.is_device_array(value):
        return _arrays.array_copy(value)
    return value


def is_tensor(value: Any) -> bool:
    """TF's ``tensor_util.is_tf_type``: what counts as a tensor here.

    Arrays (numpy, CuPy and other libraries' arrays, which :func:`as_array` takes as arrays),
    numpy scalars, ``IndexedSlices`` and variables are tensors; Python numbers, lists and other
    objects are not.
    """
    if isinstance(value, np.ndarray | np.generic | IndexedSlices | VariableBase):
        return True
    return _arrays.is_device_array(value) or is_foreign_array(value)


def convert_to_dtype(value: Any, dtype: Any, name: str = "packed") -> Any:
    """A fresh array of ``value`` in ``dtype``, as ``tf.convert_to_tensor(value, dtype)`` does.

    numpy arrays and scalars are cast (TF casts numpy input too, object arrays included);
    Python values follow TF's rule (``mwms_mpi/_constant.py``): a float (even ``1.0``) is not
    converted to an integer or bool dtype, nor an int to bool, while a bool converts to any
    number (``True`` is 1). A CuPy array stays a CuPy array on its device.

    Raises:
      TypeError: for a Python value that TF cannot convert to ``dtype``.
      ValueError: for a Python float out of ``dtype``'s range when a float32/float16 is built
        directly (TF's "out of range for a double-precision float"), and TF's other
        conversion errors.
    """
    dtype = np.dtype(dtype)
    if isinstance(value, VariableBase):
        value = value.read_value()
    elif is_foreign_array(value):
        value = from_foreign(value)
    if _arrays.is_device_array(value):
        return value.astype(dtype, copy=True)
    if isinstance(value, np.ndarray | np.generic) or hasattr(value, "__array__"):
        return np.array(value, dtype=dtype, copy=True)
    if isinstance(value, list | tuple):
        return to_array(read_variables(value), dtype, name)  # a fresh array
    if isinstance(value, int | float | complex):
        return to_array(value, dtype)  # a fresh array
    return np.array(as_array(value), dtype=dtype, copy=True)


def refuse_variable_of_other_dtype(value: Any, dtype: Any) -> None:
    """TF never casts a variable while converting it (``_dense_var_to_tensor``): assigning a
    float64 variable to a float32 one is an error, not a silent cast as for an array.

    Raises:
      ValueError: when ``value`` is a variable whose dtype is not ``dtype`` (TF's message).
    """
    if isinstance(value, VariableBase) and np.dtype(value.dtype) != np.dtype(dtype):  # type: ignore[attr-defined]
        raise ValueError(
            f"Incompatible type conversion requested to type {np.dtype(dtype).name} for "
            f"`tf.Variable of type {np.dtype(value.dtype).name}. (Variable: {value!r})"  # type: ignore[attr-defined]
        )


def refuse_tensor_of_other_dtype(value: Any, dtype: Any) -> None:
    """TF never casts a tensor while converting it (``convert_to_tensor(t, dtype)``): where TF
    has made a tensor of a value (a strategy's broadcast or reduction before a variable's
    update), an array of another dtype is an error, not the cast a numpy input gets.

    Raises:
      ValueError: when ``value`` is an array whose dtype is not ``dtype`` (TF's message).
    """
    if (
        isinstance(value, np.ndarray) or _arrays.is_device_array(value)
    ) and value.dtype != np.dtype(dtype):
        raise ValueError(
            f"Tensor conversion requested dtype {np.dtype(dtype).name} for Tensor with dtype "
            f"{value.dtype.name}: {tensor_repr(value)}"
        )


def truediv_dtype(dtype: Any) -> np.dtype:
    """The dtype of a division of ``dtype`` values (TF's ``_TRUEDIV_TABLE``): 8- and 16-bit
    integers give float32, wider ones float64; floating and complex dtypes are kept.

    Raises:
      TypeError: for bool (TF: "`x` and `y` must have the same dtype").
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        raise TypeError("`x` and `y` must have the same dtype, got tf.bool != tf.int32.")
    if dtype.kind in "iu":
        return np.dtype(np.float32 if dtype.itemsize <= 2 else np.float64)
    return dtype


def truediv(x: Any, n: Any, owned: bool = False) -> Any:
    """``x / n`` with TF's ``truediv`` dtypes: the one division rule (MEAN, aggregation MEAN).

    8- and 16-bit integers divide into float32, 32- and 64-bit ones into float64 (TF's
    ``_TRUEDIV_TABLE``); floating and complex values keep their dtype (``n`` is cast to it, as
    TF casts the divisor). Bools have no division in TF.

    Args:
      x: the array to divide (numpy or CuPy; the result is of the same kind).
      n: the divisor, a number or an array broadcastable to ``x`` (a host array divides a
        device ``x`` as a number: a strategy's element count).
      owned: whether ``x`` is a fresh array nobody else holds, which may be divided in place.

    Raises:
      TypeError: for bool ``x`` (TF: "`x` and `y` must have the same dtype").
    """
    target = truediv_dtype(x.dtype)
    xp = _arrays.array_module(x)
    if xp is not np and not _arrays.is_device_array(n) and np.ndim(n) == 0:
        n = np.asarray(n).item()  # CuPy takes Python numbers, not host arrays
    if target != x.dtype:  # integers
        return _arrays.as_result(xp.true_divide(x, n, dtype=target))
    if owned and x.ndim:
        xp.true_divide(x, n, out=x, casting="unsafe")
        return x
    divisor = xp.asarray(n).astype(x.dtype)
    return _arrays.as_result(xp.true_divide(x, divisor, dtype=x.dtype))
