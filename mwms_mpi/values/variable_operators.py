"""``Variable``'s Python operators with TF's rules (TF's ``Tensor`` operators on ``v.value()``).

TF computes ``v + y`` as ``math_ops.add(v.value(), y)``: the op converts ``y`` to the
variable's dtype (``convert_to_tensor(y, dtype=x.dtype)``), so ``float32_var + np.float64(1)``,
``+ [1, 2]`` and ``* np.array(2.0)`` are float32, numpy values are cast (``int32_var +
np.array([2.5])`` is int32) and Python ints wrap (``int32_var + 2**40`` adds 0). A variable (a
tensor) of another dtype is not converted: the kernel refuses it (``InvalidArgumentError``;
``/`` raises ``TypeError``). A Python value that cannot be converted (``int32_var * 1.5``)
gives TF's conversion ``TypeError``, except for the forward ``+``, where TF converts it by
itself and the kernel refuses it. The reflected operators (``2 * v``) convert the same way.
Here numpy arrays stand for tensors elsewhere (docs/architecture.md, "Arrays are tensors"), but
TF converts a numpy operand of an operator like a Python value, so they are cast here too.

The kernels' own rules follow: ``&``, ``|``, ``^``, ``~`` are bitwise on integers, logical
on bool and refused on floats; ``/`` follows ``convert.truediv``; integer ``//`` and ``%``
by zero raise; float ``%`` is TF's FloorMod (``-2.0 % 2`` is ``-0.0``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._tf_text import tf_api_dtype_name, tf_cpu_node, tf_dtype_name
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.convert import as_array, convert_to_dtype, truediv
from mwms_mpi.values.foreign import not_traced

__all__ = ["VariableOperators"]

_INTEGER_TYPES = "int8, int16, int32, int64, uint8, uint16, uint32, uint64"


def _mismatch(op: str, x: np.dtype[Any], y: np.dtype[Any]) -> Exception:
    """TF's error for operands of two dtypes: the kernel's, or ``truediv``'s own check."""
    if op == "RealDiv":
        return TypeError(
            f"`x` and `y` must have the same dtype, got tf.{tf_api_dtype_name(x)} != "
            f"tf.{tf_api_dtype_name(y)}."
        )
    return errors.InvalidArgumentError(
        None,
        op,
        f"cannot compute {op} as input #1(zero-based) was expected to be a {tf_dtype_name(x)} "
        f"tensor but is a {tf_dtype_name(y)} tensor [Op:{op}] name: ",
    )


def _operand(variable: Any, other: Any, op: str, reflected: bool) -> Any:
    """``other`` as an array of ``variable``'s dtype and kind, as TF's operator converts it.

    Raises:
      InvalidArgumentError: for a variable of another dtype, or a Python value the forward
        ``+`` cannot convert (TF's kernel message); ``TypeError`` for ``/`` (TF's message).
      TypeError: for another Python value that cannot be converted (TF's message).
      ValueError: for a value that is not a number or array (``None``: TF's message).
    """
    dtype = variable.dtype
    if isinstance(other, VariableBase):
        if other.dtype != dtype:  # type: ignore[attr-defined]
            raise _mismatch(op, dtype, other.dtype)  # type: ignore[attr-defined]
        return other._dense()  # type: ignore[attr-defined]
    other = not_traced(other)
    if type(other) is np.ndarray and other.dtype == dtype:
        converted = other
    else:
        try:
            converted = convert_to_dtype(other, dtype)
        except TypeError:
            if reflected or op not in ("AddV2", "RealDiv"):
                raise
            # TF's ``+`` and ``/`` convert the value by itself, then refuse its dtype
            raise _mismatch(op, dtype, np.dtype(as_array(other).dtype)) from None
    return _arrays.like(converted, variable._dense())


def _bitwise_kernel(dtype: np.dtype[Any], op: str) -> None:
    """TF's ``BitwiseAnd``/``Or``/``Xor``/``Invert`` take integers only (bool is logical).

    Raises:
      InvalidArgumentError: for a float or complex dtype (TF's message).
    """
    if dtype.kind not in "iub":
        raise errors.InvalidArgumentError(
            None,
            op,
            f"Value for attr 'T' of {tf_dtype_name(dtype)} is not in the list of allowed "
            f"values: {_INTEGER_TYPES}",
        )


# TF's Neg and Abs kernels' types, as their errors list them (neither takes bool)
_NEG_TYPES = "bfloat16, half, float, double, int8, int16, int32, int64, complex64, complex128"
_ABS_TYPES = "bfloat16, half, float, double, int8, int16, int32, int64"


def _unary_kernel(dtype: np.dtype[Any], op: str, allowed: str) -> None:
    """TF's ``Neg``/``Abs`` refuse what they have no kernel for (numpy's ``abs`` of a bool is
    the bool itself, and its ``-`` raises numpy's own ``TypeError``).

    Raises:
      InvalidArgumentError: for a dtype not in ``allowed`` (TF's message).
    """
    if tf_dtype_name(dtype) not in allowed.split(", "):
        raise errors.InvalidArgumentError(
            None,
            op,
            f"Value for attr 'T' of {tf_dtype_name(dtype)} is not in the list of allowed "
            f"values: {allowed}",
        )


def _no_integer_zero(y: Any, op: str) -> None:
    """TF's integer ``FloorDiv``/``FloorMod`` fail on a zero divisor (numpy gives 0).

    Raises:
      InvalidArgumentError: TF's "Integer division by zero".
    """
    if y.dtype.kind in "iu" and not _arrays.array_module(y).all(y):
        raise errors.InvalidArgumentError(
            None, op, tf_cpu_node(op) + f"Integer division by zero [Op:{op}] name: "
        )


def _floor_mod(x: Any, y: Any) -> Any:
    """TF's FloorMod: integers as numpy's ``mod``; floats ``fmod(x, y)``, then ``+ y`` where the
    result is non-zero and its sign differs from ``y``'s (so ``-2.0 % 2`` keeps ``-0.0``)."""
    _no_integer_zero(y, "FloorMod")
    xp = _arrays.array_module(x, y)
    if x.dtype.kind not in "fc":
        return xp.mod(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):  # TF: nan, no warning
        r = xp.fmod(x, y)
        return xp.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)


def _floor_div(x: Any, y: Any) -> Any:
    _no_integer_zero(y, "FloorDiv")
    return _arrays.array_module(x, y).floor_divide(x, y)


def _true_div(x: Any, y: Any) -> Any:
    return truediv(x, y)


def _ufunc(name: str) -> Callable[[Any, Any], Any]:
    def apply(x: Any, y: Any) -> Any:
        return getattr(_arrays.array_module(x, y), name)(x, y)

    return apply


_Check = Callable[[np.dtype[Any], str], None]


def _binary(
    kernel: Callable[[Any, Any], Any], op: str, reflected: bool = False, check: _Check | None = None
) -> Any:
    """An operator of ``Variable``: ``kernel(value, other)`` (``kernel(other, value)`` when
    reflected) after converting ``other`` with TF's rule (:func:`_operand`); ``check`` is the
    kernel's dtype check, which TF makes before it looks at the operand's dtype."""

    def method(self: Any, other: Any) -> Any:
        if check is not None:
            check(self.dtype, op)
        a, b = self._dense(), _operand(self, other, op, reflected)
        return _arrays.as_result(kernel(b, a) if reflected else kernel(a, b))

    method.__name__ = op
    return method


def _pair(
    kernel: Callable[[Any, Any], Any], op: str, check: _Check | None = None
) -> tuple[Any, Any]:
    return _binary(kernel, op, check=check), _binary(kernel, op, reflected=True, check=check)


class VariableOperators:
    """The arithmetic, comparison and bitwise operators of ``Variable``, with TF's rules.

    ``__array_priority__`` is TF's (``Tensor`` and ``Variable`` set 100): numpy's operators
    then defer to the variable's, so ``np.float64(1) + v`` converts as ``v + np.float64(1)``.
    """

    __slots__ = ()
    __array_priority__ = 100

    def _dense(self) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    __add__, __radd__ = _pair(_ufunc("add"), "AddV2")
    __sub__, __rsub__ = _pair(_ufunc("subtract"), "Sub")
    __mul__, __rmul__ = _pair(_ufunc("multiply"), "Mul")
    __truediv__, __rtruediv__ = _pair(_true_div, "RealDiv")
    __floordiv__, __rfloordiv__ = _pair(_floor_div, "FloorDiv")
    __mod__, __rmod__ = _pair(_floor_mod, "FloorMod")
    __pow__, __rpow__ = _pair(_ufunc("power"), "Pow")
    __matmul__, __rmatmul__ = _pair(_ufunc("matmul"), "MatMul")
    __and__, __rand__ = _pair(_ufunc("bitwise_and"), "BitwiseAnd", _bitwise_kernel)
    __or__, __ror__ = _pair(_ufunc("bitwise_or"), "BitwiseOr", _bitwise_kernel)
    __xor__, __rxor__ = _pair(_ufunc("bitwise_xor"), "BitwiseXor", _bitwise_kernel)
    __lt__ = _binary(_ufunc("less"), "Less")
    __le__ = _binary(_ufunc("less_equal"), "LessEqual")
    __gt__ = _binary(_ufunc("greater"), "Greater")
    __ge__ = _binary(_ufunc("greater_equal"), "GreaterEqual")
    __eq__ = _binary(_ufunc("equal"), "Equal")
    __ne__ = _binary(_ufunc("not_equal"), "NotEqual")

    def __neg__(self) -> Any:
        """``-v`` (TF's ``Neg``).

        Raises:
          InvalidArgumentError: for a bool or unsigned variable (TF's message).
        """
        value = self._dense()
        _unary_kernel(value.dtype, "Neg", _NEG_TYPES)
        return _arrays.as_result(-value)

    def __abs__(self) -> Any:
        """``abs(v)`` (TF's ``Abs``; ``ComplexAbs`` for complex values, a real result).

        Raises:
          InvalidArgumentError: for a bool or unsigned variable (TF's message).
        """
        value = self._dense()
        if value.dtype.kind != "c":
            _unary_kernel(value.dtype, "Abs", _ABS_TYPES)
        return _arrays.as_result(abs(value))

    def __invert__(self) -> Any:
        """Bitwise not of an integer variable, logical not of a bool one (TF's ``Invert`` and
        ``LogicalNot``).

        Raises:
          InvalidArgumentError: for a float variable (TF's message).
        """
        value = self._dense()
        _bitwise_kernel(value.dtype, "Invert")
        return _arrays.as_result(~value)
