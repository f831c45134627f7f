"""Python lists and tuples that hold arrays, packed as TF packs lists that hold tensors.

docs/architecture.md, "Arrays are tensors": a numpy array plays a ``tf.Tensor``. TF converts a
(nested) list or tuple holding a tensor with its autopacking rule (``array_ops.py``,
``_autopacking_conversion_function``), not with ``tf.constant``'s sequence rule
(``_constant.py``), which would read the arrays' values as Python numbers (``[x]`` of int64
``x`` would be int32). The rule, spelled out here once for every API (``_constant.to_array``
calls it):

1. The dtype is the first array's (depth-first through lists and tuples), or the requested one;
   with a requested dtype every array is first cast to it (TF's ``Cast``: ``[x_f32]`` to int64
   truncates).
2. A level whose elements are all arrays is stacked without a dtype check (TF's eager fast
   path: arrays of two dtypes raise ``Pack``'s ``InvalidArgumentError``); at another level an
   array of another dtype raises TF's ``TypeError``, Python values (numbers, numpy scalars,
   nested lists without arrays) are converted as ``tf.constant(value, dtype)`` converts them,
   and the level is stacked (arrays of different shapes raise ``Pack``'s shape error).

Only lists and tuples are walked (a dict inside is a leaf, as in TF). This module imports
``errors`` alone: the element conversion is ``_constant.to_array``, handed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import errors
from mwms_mpi._tf_text import (
    tensor_repr,
    tf_api_dtype_name,
    tf_cpu_node,
    tf_dtype_name,
    tf_shape_string,
)

Convert = Callable[[Any, Any], np.ndarray]

_SCALARS = frozenset({int, float, bool, complex, str, bytes})


def is_tensor(item: Any) -> bool:
    """An array that plays a tensor in a list: any ``ndarray`` but an object array (no tensor
    has that dtype; TF converts its elements, as ``tf.constant`` does a list's)."""
    return isinstance(item, np.ndarray) and item.dtype.kind != "O"


def packed_dtype(value: Any) -> np.dtype | None:
    """The dtype of the first array in nested lists and tuples, or ``None`` when there is none
    (TF's ``_get_dtype_from_nested_lists``: then the sequence rule converts ``value``)."""
    if set(map(type, value)) <= _SCALARS:  # a flat list of numbers: at C speed
        return None
    for item in value:
        if is_tensor(item):
            return _native(item.dtype)
        if isinstance(item, list | tuple):
            found = packed_dtype(item)
            if found is not None:
                return found
    return None


def pack(
    value: list[Any] | tuple[Any, ...],
    dtype: Any,
    convert: Convert,
    graph: bool = False,
    name: str = "packed",
) -> np.ndarray:
    """``tf.convert_to_tensor(value, dtype)`` for a list or tuple that holds an array.

    Args:
      value: the list or tuple; :func:`packed_dtype` must have found an array in it.
      dtype: the requested dtype, or ``None`` for the first array's.
      convert: ``tf.constant(value, dtype)`` for the values that are not arrays (an array's
        own conversion too: subclasses, byte order, unicode).
      graph: TF's rule inside a ``tf.function`` (``_graph_constant.py``): no eager fast path,
        so arrays of two dtypes at one level are the ``TypeError``, and a shape mismatch is
        ``Pack``'s shape-inference ``ValueError``.
      name: ``convert_to_tensor``'s name, which TF's ``Pack`` errors of the top level end with.

    Raises:
      TypeError: an array of another dtype beside Python values, or a Python value that TF
        will not convert to the dtype (TF's messages).
      errors.InvalidArgumentError: arrays of two dtypes, or elements of different shapes, at
        one level (TF's ``Pack`` messages).
    """
    inferred = packed_dtype(value)
    assert inferred is not None, "pack() of a sequence without an array"
    target = inferred if dtype is None else np.dtype(dtype)
    if not _same(target, inferred):
        value = _cast_arrays(value, target, convert)
    result = _helper(value, target, name, convert, graph)
    assert isinstance(result, np.ndarray)
    return result


def _same(dtype: np.dtype, other: np.dtype) -> bool:
    """One TF dtype: bytes of any length are all ``tf.string``."""
    return dtype == other or (dtype.kind == "S" and other.kind == "S")


def _convert_to(item: Any, dtype: np.dtype, convert: Convert) -> np.ndarray:
    """``tf.constant(item, dtype)``; ``tf.string`` has no length, so bytes keep theirs."""
    if dtype.kind != "S":
        return convert(item, dtype)
    array = convert(item, None)
    if array.dtype.kind != "S":
        raise TypeError(f"Cannot convert {item!r} to EagerTensor of dtype string")
    return array


def _native(dtype: np.dtype) -> np.dtype:
    """An array's dtype as TF sees it (native order; unicode is ``tf.string``)."""
    if dtype.kind == "U":
        return np.dtype(np.bytes_)
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _cast_arrays(value: Any, dtype: np.dtype, convert: Convert) -> Any:
    """Every array of the nest cast to ``dtype`` (TF's ``_cast_nested_seqs_to_dtype``)."""
    if is_tensor(value):
        array = convert(value, None)
        if _same(array.dtype, dtype):
            return array
        if "S" in (array.dtype.kind, dtype.kind):  # TF has no cast to or from strings
            raise _unimplemented_cast(array.dtype, dtype)
        with np.errstate(all="ignore"):
            return array.astype(dtype)
    if isinstance(value, list | tuple):
        return [_cast_arrays(item, dtype, convert) for item in value]  # any tuple subclass too
    return value


def _unimplemented_cast(source: np.dtype, dtype: np.dtype) -> errors.UnimplementedError:
    name = tf_dtype_name(dtype)
    return errors.UnimplementedError(
        None,
        None,
        f"{tf_cpu_node('Cast')}Cast {tf_dtype_name(source)} to "
        f"{name} is not supported [Op:Cast] name: ",
    )


def _helper(value: Any, dtype: np.dtype, name: str, convert: Convert, graph: bool) -> Any:
    """TF's ``_autopacking_helper``: an array when the level holds one, else the list."""
    if not graph and all(is_tensor(item) for item in value):
        return _stack([convert(item, None) for item in value], name, graph)
    must_pack = False
    items: list[Any] = []
    for index, item in enumerate(value):
        if is_tensor(item):
            array = convert(item, None)
            if not _same(array.dtype, dtype):
                raise TypeError(
                    f"Cannot convert a list containing a tensor of dtype "
                    f"<dtype: '{tf_api_dtype_name(array.dtype)}'> to "
                    f"<dtype: '{tf_api_dtype_name(dtype)}'> "
                    f"(Tensor is: {tensor_repr(array)})"
                )
            items.append(array)
            must_pack = True
        elif isinstance(item, list | tuple):
            converted = _helper(item, dtype, str(index), convert, graph)
            must_pack = must_pack or isinstance(converted, np.ndarray)
            items.append(converted)
        else:
            items.append(item)
    if not must_pack:
        return items
    arrays = [item if is_tensor(item) else _convert_to(item, dtype, convert) for item in items]
    return _stack(arrays, "", graph)


def _stack(arrays: list[np.ndarray], name: str, graph: bool) -> np.ndarray:
    """TF's ``Pack`` of arrays of one dtype and shape, with its errors."""
    if not arrays:  # an empty nested level: TF's Pack of no inputs
        raise errors.InvalidArgumentError(
            None,
            None,
            "OpKernel 'Pack' has constraint on attr 'T' not in NodeDef '[N=0, axis=0]', "
            'KernelDef: \'goo.gle/debugstr   op: "Pack" device_type: "CPU" constraint { name: '
            '"T" allowed_values { list { type: DT_FLOAT8_E4M3FN } } }\' [Op:Pack] name: '
            f"{name}",
        )
    first = arrays[0].shape
    for index, array in enumerate(arrays[1:], 1):
        if not _same(array.dtype, arrays[0].dtype):
            raise errors.InvalidArgumentError(
                None,
                None,
                f"cannot compute Pack as input #{index}(zero-based) was expected to be a "
                f"{tf_dtype_name(arrays[0].dtype)} tensor but is a "
                f"{tf_dtype_name(array.dtype)} tensor [Op:Pack] name: {name}",
            )
    for index, array in enumerate(arrays[1:], 1):
        if array.shape != first and graph:  # shape inference, when the graph is built
            raise ValueError(
                f"Shapes of all inputs must match: values[0].shape = {tf_shape_string(first)} != "
                f"values[{index}].shape = {tf_shape_string(array.shape)} (Pack in a tf.function)"
            )
        if array.shape != first:
            raise errors.InvalidArgumentError(
                None,
                None,
                f"{tf_cpu_node(f'Pack_N_{len(arrays)}')}Shapes of "
                f"all inputs must match: values[0].shape = {tf_shape_string(first)} != "
                f"values[{index}].shape = {tf_shape_string(array.shape)} [Op:Pack] name: {name}",
            )
    return np.stack(arrays)
