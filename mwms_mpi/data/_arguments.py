"""Dataset methods' arguments as TF takes them: integer arguments, TF's argument errors, and
the dataset's own copy of the data it is given."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from mwms_mpi import errors, nest


def int_arg(value: Any, op: str) -> int:
    """An integer argument given as a Python or numpy integer (or 0-d integer array)."""
    if value is None:
        raise ValueError(
            f"Attempt to convert a value (None) with an unsupported type ({type(None)}) to a "
            "Tensor."
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.ndarray):
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype int64")
    array = np.asarray(value)
    if array.ndim or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype int64")
    return int(array)


def invalid(op: str, message: str) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(None, op, f"{message} [Op:{op}]")


def owned_copy(element: Any) -> Any:
    """A fresh copy of ``element``: the dataset owns its data, so later changes to the
    caller's arrays do not leak in."""
    return nest.map_structure(np.array, element)


def bool_arg(value: Any) -> bool:
    """A bool argument as TF converts it to a ``tf.bool`` tensor (no ints).

    Raises:
      TypeError: not a Python or numpy bool.
    """
    if isinstance(value, bool | np.bool_) or (
        isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.ndim == 0
    ):
        return bool(value)
    raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype bool")


def attr_bool(value: Any, name: str, default: bool) -> bool:
    """A bool op attribute as TF's op-def library takes it (``_MakeBool``): ``None`` is
    ``default``, anything but a Python bool (numpy's included) is refused.

    Raises:
      TypeError: TF's ``Expected bool for argument '<name>' not <repr>.``
    """
    if value is None:
        return default
    if not isinstance(value, bool):
        raise TypeError(f"Expected bool for argument '{name}' not {value!r}.")
    return value
