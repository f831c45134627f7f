"""``mwms_mpi.Variable`` and its distributed forms (TF's variables.py and values.py, numpy-backed).

``Variable(...)`` outside any strategy is a plain variable. Inside a strategy's scope (or its
replica functions) the call goes to the strategy's ``extended._create_variable(next_creator,
**kwargs)`` hook (typed: ``_context.ExtendedLike``), which builds one plain component per local
replica with ``next_creator`` and wraps them with :func:`create_mirrored_variable`. This module
never imports the strategy layer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import mwms_mpi.values.array_reads as reads
from mwms_mpi import _arrays, _context, _name_scope
from mwms_mpi._context import StrategyLike
from mwms_mpi.types import VariableAggregation, VariableSynchronization
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.convert import as_array, convert_to_dtype, refuse_variable_of_other_dtype
from mwms_mpi.values.scatter import ScatterMixin
from mwms_mpi.values.variable_operators import VariableOperators

_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def initial_value_array(initial_value: Any, dtype: Any = None, name: str = "initial_value") -> Any:
    """Calls a callable initial value and converts it as ``tf.Variable`` does (a fresh array).

    A CuPy initial value makes a variable stored on its GPU; anything else, on the host.

    Raises:
      ValueError: when ``initial_value`` is ``None`` (TF's message).
      TypeError: for a Python value that cannot be converted to ``dtype``.
    """
    if initial_value is None:
        raise ValueError(
            "The `initial_value` arg to `tf.Variable` must be specified except when you are not "
            "providing a `variable_def`. You provided neither."
        )
    if callable(initial_value):
        initial_value = initial_value()
    if dtype is not None:  # ``name``: TF's conversion name, which its Pack errors end with
        return convert_to_dtype(initial_value, dtype, name)
    return _arrays.array_copy(as_array(initial_value, name))


class _VariableMeta(type):
    """Routes ``Variable(...)`` through the current strategy's variable creator (TF's metaclass)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is not Variable:
            return super().__call__(*args, **kwargs)
        bound = _SIGNATURE.bind(None, *args, **kwargs)
        bound.apply_defaults()
        kw = dict(bound.arguments)
        del kw["self"]
        kw["synchronization"], kw["aggregation"], kw["trainable"] = _validate_plain(
            kw["synchronization"], kw["aggregation"], kw["trainable"], kw["name"]
        )
        strategy = _context.current().strategy
        if strategy is not None and strategy is not _context.get_default().strategy:
            return strategy.extended._create_variable(_plain_creator, **kw)
        return _plain_creator(**kw)

    @property
    def __signature__(cls) -> inspect.Signature:
        """A class's call signature is its ``__init__``'s (for ``help``, IDEs, ``inspect``).

        Without it ``inspect.signature(Variable)`` shows this metaclass's ``(*args, **kwargs)``.
        """
        init = _SIGNATURE if cls is Variable else inspect.signature(cls.__init__)  # type: ignore[misc]
        params = list(init.parameters.values())[1:]
        return init.replace(parameters=params, return_annotation=inspect.Signature.empty)


def _plain_creator(**kwargs: Any) -> Variable:
    variable: Variable = type.__call__(Variable, **kwargs)
    return variable


def _validate_plain(
    synchronization: Any, aggregation: Any, trainable: bool | None, name: str | None
) -> tuple[VariableSynchronization, VariableAggregation, bool]:
    """TF's ``validate_synchronization_aggregation_trainable``."""
    if aggregation is None:
        aggregation = VariableAggregation.NONE
    elif not isinstance(aggregation, VariableAggregation):
        try:
            aggregation = VariableAggregation(aggregation)
        except ValueError:
            raise ValueError(
                f"Invalid variable aggregation mode: {aggregation} for variable: {name}"
            ) from None
    if synchronization is None:
        synchronization = VariableSynchronization.AUTO
    elif not isinstance(synchronization, VariableSynchronization):
        try:
            synchronization = VariableSynchronization(synchronization)
        except ValueError:
            raise ValueError(
                f"Invalid variable synchronization mode: {synchronization} for variable: {name}"
            ) from None
    if trainable is None:
        trainable = synchronization != VariableSynchronization.ON_READ
    return synchronization, aggregation, bool(trainable)


class Variable(
    reads.ArrayReadsMixin, ScatterMixin, VariableOperators, VariableBase, metaclass=_VariableMeta
):
    """A variable maintains shared, persistent state manipulated by a program (``tf.Variable``).

    The value is a numpy array, or a CuPy array on a GPU when the initial value is one. Reads
    (``read_value``, ``value``, operators) return fresh arrays of that kind, ``numpy()`` a
    host copy; ``assign``/``assign_add``/``assign_sub`` convert the value to the variable's
    dtype as ``tf.convert_to_tensor`` does and keep the shape. Operators follow TF's rules
    (``values/variable_operators.py``). Inside ``strategy.scope()`` the constructor returns a
    ``MirroredVariable`` or ``SyncOnReadVariable``.

    Args:
      initial_value: an array-like, or a callable returning one, the initial value.
      trainable: whether gradients are taken of it; defaults to ``True`` unless
        ``synchronization`` is ``ON_READ``.
      validate_shape: accepted for TF compatibility (shapes are always checked).
      caching_device: accepted and ignored.
      name: the name; ``"Variable"`` by default. The variable's ``name`` is the current name
        scope, then ``name``, then ``":0"`` (``name_scope``: ``_name_scope.variable_name``).
      variable_def: not supported; must be ``None``.
      dtype: the dtype to convert the initial value to; inferred as ``tf.constant`` does.
      import_scope: accepted and ignored.
      constraint: stored as ``constraint`` (optimizers may apply it).
      synchronization: a ``VariableSynchronization``.
      aggregation: a ``VariableAggregation``.
      shape: the shape, possibly with ``None`` dimensions (or ``None`` for any shape), which
        then allows assigning values of other shapes.
      experimental_enable_variable_lifting: accepted and ignored.

    Raises:
      ValueError: for a missing initial value, an incompatible ``shape``, a ``constraint``
        that is not callable, or invalid ``synchronization``/``aggregation`` (TF's messages).
      TypeError: for an initial value that cannot be converted to ``dtype``.
    """

    _distribute_strategy: StrategyLike | None = None
    _device = _CPU0

    def __init__(
        self,
        initial_value: Any = None,
        trainable: bool | None = None,
        validate_shape: bool = True,
        caching_device: Any = None,
        name: str | None = None,
        variable_def: Any = None,
        dtype: Any = None,
        import_scope: Any = None,
        constraint: Callable[[Any], Any] | None = None,
        synchronization: VariableSynchronization = VariableSynchronization.AUTO,
        aggregation: VariableAggregation = VariableAggregation.NONE,
        shape: Any = None,
        experimental_enable_variable_lifting: bool = True,
    ) -> None:
        del validate_shape, caching_device, import_scope, experimental_enable_variable_lifting
        if variable_def is not None:
            raise NotImplementedError("variable_def is not supported (there are no graphs here)")
        if constraint is not None and not callable(constraint):
            raise ValueError(  # TF's text, repeated words and two spaces included
                "Argument `constraint` must be None or a callable. a callable. Got a "
                f"{type(constraint)}:  {constraint}"
            )
        self._synchronization, self._aggregation, self._trainable = _validate_plain(
            synchronization, aggregation, trainable, name
        )
        value = initial_value_array(initial_value, dtype)
        self._value = value
        self._dtype: np.dtype[Any] = value.dtype
        self._shape = value.shape if shape is None else _as_shape(shape)
        if not _compatible(self._shape, value.shape):
            raise ValueError(
                f"In this `tf.Variable` creation, the initial value's shape ({value.shape}) is "
                f"not compatible with the explicitly supplied `shape` argument ({self._shape})."
            )
        self._name = _name_scope.variable_name(name)
        self._constraint = constraint
        self._distributed_container: Any = None

    # -- properties ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The name of this variable (``"<name>:0"``)."""
        return self._name

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of this variable (a numpy dtype)."""
        return self._dtype

    @property
    def shape(self) -> Any:
        """The shape of this variable, a tuple (``None`` entries for unknown dimensions)."""
        return self._shape

    def get_shape(self) -> Any:
        """Alias of ``shape``."""
        return self.shape

    @property
    def trainable(self) -> bool:
        """Whether this variable is trainable."""
        return self._trainable

    @property
    def synchronization(self) -> VariableSynchronization:
        """The ``VariableSynchronization`` this variable was created with."""
        return self._synchronization

    @property
    def aggregation(self) -> VariableAggregation:
        """The ``VariableAggregation`` this variable was created with."""
        return self._aggregation

    @property
    def constraint(self) -> Any:
        """The constraint function, or ``None``."""
        return self._constraint

    @property
    def device(self) -> str:
        """The device of this variable."""
        return self._device

    @property
    def distribute_strategy(self) -> StrategyLike | None:
        """The strategy this variable was created under (``None`` for a plain variable)."""
        return self._distribute_strategy

    @property
    def initial_value(self) -> Any:
        """Not available eagerly, as in TF.

        Raises:
          RuntimeError: always (TF's eager message).
        """
        raise RuntimeError("This property is not supported when eager execution is enabled.")

    # -- reads -----------------------------------------------------------------------------

    def _dense(self) -> Any:
        """The current value for computing with (not necessarily a copy)."""
        return self._value

    def read_value(self) -> Any:
        """Returns the value of this variable, read in the current context (a fresh array)."""
        reads.raise_if_jit_tracing("Variable.read_value")
        return self._value.copy()

    def value(self) -> Any:
        """Returns the last snapshot of this variable (a fresh array)."""
        reads.raise_if_jit_tracing("Variable.value")
        return self._value.copy()

    def numpy(self) -> Any:
        """Returns the value as a numpy array (a fresh host array, also of a variable on a GPU;
        a numpy scalar for 0-d, as TF)."""
        value = np.asarray(_arrays.to_host(self.read_value()))
        return value[()] if value.ndim == 0 else value

    # -- writes ----------------------------------------------------------------------------

    def assign(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Assigns a new value to the variable.

        Returns:
          When ``read_value`` is true, an ``UnreadVariable`` (the variable, read when used, as
          TF's eager ``assign`` returns); else ``None``.

        Raises:
          ValueError: if the value's shape is incompatible, or the value is a variable of
            another dtype (TF's messages).
          TypeError: if the value cannot be converted to the variable's dtype.
        """
        refuse_variable_of_other_dtype(value, self._dtype)
        array = _arrays.like(convert_to_dtype(value, self._dtype), self._value)
        if not _compatible(self._shape, array.shape):
            raise ValueError(
                f"Cannot assign value to variable ' {self._name}': Shape mismatch.The variable "
                f"shape {self._shape}, and the assigned value shape {array.shape} are incompatible."
            )
        self._value = array
        return UnreadVariable(self) if read_value else None

    def _apply(self, value: Any, read_value: bool, op: Any, op_name: str) -> Any:
        refuse_variable_of_other_dtype(value, self._dtype)
        array = _arrays.like(convert_to_dtype(value, self._dtype), self._value)
        fn = getattr(_arrays.array_module(self._value), op.__name__)
        self._update_with(fn, array, op_name)
        return UnreadVariable(self) if read_value else None

    def assign_add(
        self,
        delta: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Adds a value to this variable.

        Returns:
          An ``UnreadVariable`` when ``read_value`` is true, else ``None``.

        Raises:
          InvalidArgumentError: if the shapes are not equal (TF's message).
        """
        return self._apply(delta, read_value, np.add, "AssignAddVariableOp")

    def assign_sub(
        self,
        delta: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Subtracts a value from this variable.

        Returns:
          An ``UnreadVariable`` when ``read_value`` is true, else ``None``.

        Raises:
          InvalidArgumentError: if the shapes are not equal (TF's message).
        """
        return self._apply(delta, read_value, np.subtract, "AssignSubVariableOp")

    def _lazy_read(self) -> Any:  # TF's name: what an update returns, read when used
        return UnreadVariable(self)

    # -- Python protocol -------------------------------------------------------------------

    def ref(self) -> Any:
        """A hashable reference to this variable (``deref()`` returns it), as TF's ``ref``."""
        return _Reference(self)

    def __hash__(self) -> int:
        raise TypeError(
            f"Variable is unhashable. Instead, use variable.ref() as the key. (Variable: {self})"
        )

    def __repr__(self) -> str:
        array = np.asarray(_arrays.to_host(self._dense()))
        value = repr(array) if array.ndim else str(array[()])
        return (
            f"<mwms_mpi.Variable '{self.name}' shape={self.shape} dtype={self.dtype}, "
            f"numpy={value}>"
        )

    def __getitem__(self, key: Any) -> Any:
        return _arrays.array_copy(self._dense()[key])

    # TF's BaseResourceVariable converts its read with __bool__, __float__ and __int__ but has
    # no __index__: a variable is no list index nor range() bound, whatever its dtype.

    def __bool__(self) -> bool:
        """The read's truth, as an ``EagerTensor``'s: an empty value is ``False`` (numpy's
        ambiguity error is kept for more than one element, as TF raises it)."""
        dense = self._dense()
        return False if dense.size == 0 else bool(dense)

    def __float__(self) -> float:
        return float(self._dense())

    def __int__(self) -> int:
        return int(self._dense())

    def __pos__(self) -> Any:
        return _arrays.array_copy(self._dense())

    def __iter__(self) -> Iterator[Any]:
        """The rows of the value, each a fresh array (TF iterates the tensor it reads).

        Raises:
          TypeError: for a scalar variable (TF's message; Python's fallback through
            ``__getitem__`` would give an empty list).
        """
        value = self._dense()
        if value.ndim == 0:
            raise TypeError("Cannot iterate over a scalar tensor.")
        return iter([_arrays.array_copy(row) for row in value])


_SIGNATURE = inspect.signature(Variable.__init__)


class UnreadVariable(Variable):
    """What ``assign``/``assign_add``/``assign_sub`` return: the variable, read when used.

    TF's eager ``_UnreadVariable``: it shares the variable's storage, so reading it gives the
    variable's value at the time of the read (a later assignment shows), and assigning to it
    assigns to the variable. It belongs to no distributed variable (``value_container`` of it
    is itself), which is why a ``MirroredVariable``'s update returns it and not the container.

    Args:
      parent: the variable that was updated.
    """

    def __init__(self, parent: Variable) -> None:
        self._parent = parent
        self._dtype = parent._dtype
        self._shape = parent._shape
        self._name = "UnreadVariable"
        self._synchronization = parent._synchronization
        self._aggregation = parent._aggregation
        self._trainable = parent._trainable
        self._constraint = parent._constraint
        self._device = parent._device
        self._distributed_container = None

    @property
    def _value(self) -> Any:
        return self._parent._value

    @_value.setter
    def _value(self, array: Any) -> None:
        self._parent._value = array


class _Reference:
    """A hashable reference to a variable (TF's ``Reference``)."""

    __slots__ = ("_wrapped",)

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def deref(self) -> Any:
        """Returns the referenced variable."""
        return self._wrapped

    def __hash__(self) -> int:
        return id(self._wrapped)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reference) and other._wrapped is self._wrapped


def _as_shape(shape: Any) -> Any:
    if shape is None:
        return None
    if isinstance(shape, int):
        return (shape,)
    return tuple(None if d is None else int(d) for d in shape)


def _compatible(declared: Any, actual: tuple[int, ...]) -> bool:
    if declared is None:
        return True
    if len(declared) != len(actual):
        return False
    return all(d is None or d == a for d, a in zip(declared, actual, strict=True))
