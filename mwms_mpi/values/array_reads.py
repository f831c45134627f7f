"""A variable handed to another library: ``np.asarray(v)``, ``jnp.asarray(v)`` and a no-copy read.

``__array__`` is TF's (``BaseResourceVariable.__array__``): the current value as a fresh,
writeable array that later updates never change, cast to ``dtype`` when asked; TF 2.21 refuses
``np.asarray(v, copy=False)`` (numpy's "Unable to avoid copy" ``ValueError``), and so does this.

``read_only_value()`` (mwms_mpi's own, no TF counterpart) is the read that does not copy, for
handing parameters to an autodiff library every step. It follows docs/architecture.md,
"Results are values", by copy-on-write, not by a validity window: the variable's buffer is
frozen (``writeable=False``) and handed out as a read-only view; the next in-place update
(``assign_add``, ``assign_sub``, an optimizer's step: ``_update_with``) writes a new buffer
instead (:func:`update_target`), and ``assign``/``scatter_*`` always store a new buffer. What
the caller holds therefore never changes, and numpy refuses to make it writeable again (its
base is not writeable). A read costs nothing; the update after it costs one allocation (no
more than the copy it replaces), however many reads came between. A CuPy array has no
read-only flag: a device variable's ``read_only_value()`` is a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi.values.foreign import not_traced, raise_if_jit_tracing
from mwms_mpi.values.scatter import tf_shape

__all__ = [
    "ArrayReadsMixin",
    "apply_in_place",
    "frozen_view",
    "not_traced",
    "raise_if_jit_tracing",
    "update_target",
]

_NO_COPY = (
    "Unable to avoid copy while creating an array as requested.\nIf using "
    "`np.array(obj, copy=False)` replace it with `np.asarray(obj)` to allow a copy when needed "
    "(no behavior change in NumPy 1.x).\nFor more details, see "
    "https://numpy.org/devdocs/numpy_2_0_migration_guide.html#adapting-to-changes-in-the-copy-keyword."
)


def frozen_view(array: Any) -> Any:
    """A read-only view of ``array`` after freezing ``array`` itself (a copy of a CuPy array).

    The variable keeps ``array`` as its storage: frozen, it is never written again (see
    :func:`update_target`), so the view is a value.
    """
    if _arrays.is_device_array(array):
        return array.copy()
    if array.flags.writeable:
        array.flags.writeable = False
    return array.view()


def update_target(array: Any) -> Any:
    """Where an in-place update of a variable's storage ``array`` writes: ``array`` itself,
    or a new buffer of its shape and dtype when it was handed out by ``read_only_value()``."""
    if _arrays.is_device_array(array) or array.flags.writeable:
        return array
    return np.empty_like(array)


def apply_in_place(fn: Any, array: Any, operand: Any) -> Any:
    """``fn(array, operand)`` written into ``array`` (a variable's ``assign_add``/``sub``), or
    into a new buffer when ``array`` was handed out (:func:`update_target`); returns where.

    ``fn`` is a numpy (or CuPy) ufunc; the variable's dtype is kept (``casting="unsafe"``, as
    TF's update kernels cast the delta).
    """
    out = update_target(array)
    fn(array, operand, out=out, casting="unsafe")
    return out


class ArrayReadsMixin:
    """``__array__`` and ``read_only_value`` of ``Variable`` and the distributed variables, and
    the in-place update that keeps what ``read_only_value`` handed out (``_update_with``)."""

    _value: Any

    def read_value(self) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The current value as a fresh host array (TF's ``__array__``), of ``dtype`` if given.

        Raises:
          ValueError: for ``copy=False`` (TF 2.21 cannot give a variable without a copy), for
            a 0-d distributed variable whose read is a tensor (:meth:`_reads_a_scalar_tensor`),
            and while ``jax.jit`` traces (the value would be frozen into the compiled function).
        """
        raise_if_jit_tracing("np.asarray(variable)` / `jnp.asarray(variable)")
        if copy is False:
            raise ValueError(_NO_COPY)
        if dtype is None and self._reads_a_scalar_tensor():
            raise ValueError(  # numpy's text in TF, then why and what to do instead
                "object __array__ method not producing an array: as in TF 2.21, where this "
                "0-d variable's __array__ gives a numpy scalar, which numpy refuses; read it "
                "with v.numpy() or v.read_value(), or pass a dtype (np.asarray(v, v.dtype))"
            )
        value = np.asarray(_arrays.to_host(self.read_value()))
        if dtype is None or value.dtype == np.dtype(dtype):
            return value
        return value.astype(dtype)

    def _reads_a_scalar_tensor(self) -> bool:
        """Whether TF's ``np.asarray(v)`` reaches a 0-d tensor's ``__array__``, which gives a
        numpy scalar that numpy refuses: never for a variable (its own ``__array__``), where a
        distributed variable's cross-replica read is a tensor (``distributed_variable.py``)."""
        return False

    def read_only_value(self) -> Any:
        """The value in the current context without a copy: a read-only array that keeps this
        value whatever later updates do (copy-on-write), for handing to another library.

        mwms_mpi's own read (TF has none): ``read_value()`` and ``np.asarray(v)`` copy, as TF's
        do. The result cannot be written (``writeable=False``); ``np.array(...)`` it for a
        writeable copy.

        Raises:
          ValueError: while ``jax.jit`` traces (read outside, pass the value in).
        """
        raise_if_jit_tracing("Variable.read_only_value")
        return frozen_view(self._value)

    def _update_with(self, fn: Any, operand: Any, op_name: str) -> Any:
        """``fn(value, operand)`` as the new value: the in-place update of ``assign_add``,
        ``assign_sub`` and an optimizer's step (``optimizers/adam.py``), with no conversion.

        ``operand`` is an array of this variable's kind (numpy or CuPy) that the caller made;
        its dtype is cast to the variable's. The storage is written in place unless
        ``read_only_value()`` handed it out (then into a new buffer: :func:`apply_in_place`),
        so nothing returned earlier changes.

        Returns:
          The new storage, for the caller's own arithmetic only: never handed out.

        Raises:
          InvalidArgumentError: for a bool variable (TF registers no arithmetic update kernel
            for bool, so numpy's logical OR must not stand in), and if ``operand``'s shape is
            not the variable's (TF's message for ``op_name``); the value is then unchanged.
        """
        if self._value.dtype.kind == "b":
            raise errors.InvalidArgumentError(
                None,
                op_name,
                f"No OpKernel was registered to support Op '{op_name}' used by "
                f"{{{{node {op_name}}}}} with these attrs: [dtype=DT_BOOL]",
            )
        if operand.shape != self._value.shape:
            raise errors.InvalidArgumentError(
                None,
                op_name,
                f"Cannot update variable with shape {tf_shape(self._value.shape)} using a "
                f"Tensor with shape {tf_shape(operand.shape)}, shapes must be equal.",
            )
        self._value = apply_in_place(fn, self._value, operand)
        return self._value
