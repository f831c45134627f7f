"""Transformations that carry something from element to element: ``scan``, ``reduce``,
``take_while``, ``unique`` and ``get_single_element`` (TF 2.21's ``ScanDataset``,
``ReduceDataset``, ``TakeWhileDataset``, ``UniqueDataset``, ``DatasetToSingleElement``).

TF traces ``scan_func`` and ``reduce_func`` with the state's spec and, where the new state's
shapes differ, again with the relaxed shapes; here the functions run on probe inputs (as
``map``'s do, ``_functions``) with the state as a first component, relaxed the same way, so the
same errors come when the transformation is made.
"""

from __future__ import annotations

import collections.abc as abc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi._tf_text import tf_api_dtype_name
from mwms_mpi.data import _functions, _structure
from mwms_mpi.data._padded import shape_text
from mwms_mpi.data._pipeline import UNKNOWN, Node
from mwms_mpi.data.tensor_spec import DatasetSpec, TensorSpec


def tf_spec_text(spec: Any) -> str:
    """A structure of specs as TF prints it (``TensorSpec(shape=(), dtype=tf.int64, ...)``)."""
    if isinstance(spec, TensorSpec):
        dtype = tf_api_dtype_name(spec.dtype)
        return f"TensorSpec(shape={shape_text(spec.shape)}, dtype=tf.{dtype}, name=None)"
    if isinstance(spec, DatasetSpec):
        dims = ", ".join("None" if d is None else str(d) for d in spec.shape)
        return f"DatasetSpec({tf_spec_text(spec.element_spec)}, TensorShape([{dims}]))"
    if isinstance(spec, abc.Mapping):
        return "{" + ", ".join(f"{k!r}: {tf_spec_text(v)}" for k, v in spec.items()) + "}"
    parts = [tf_spec_text(v) for v in spec]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _dtype_text(spec: Any) -> str:
    """The dtypes of a spec structure as TF's messages print them: one ``<dtype: 'int64'>``, or
    a structure of ``tf.int64``."""
    if isinstance(spec, TensorSpec):
        return f"<dtype: '{tf_api_dtype_name(spec.dtype)}'>"

    def one(s: Any) -> str:
        if isinstance(s, TensorSpec):
            return f"tf.{tf_api_dtype_name(s.dtype)}"
        if isinstance(s, abc.Mapping):
            return "{" + ", ".join(f"{k!r}: {one(v)}" for k, v in s.items()) + "}"
        parts = [one(v) for v in s]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    return one(spec)


def initial_state(value: Any) -> Any:
    """``initial_state`` as TF's ``structure.normalize_element`` takes it.

    Raises:
      TypeError: None (TF fails so on a state without type).
    """
    if value is None:
        raise TypeError("issubclass() arg 1 must be a class")
    return _structure.normalize(value)


class _StateAndInput(Node):
    """``(state, element)`` pairs for probing a state function: the state's spec and the
    input's; iterated (the real-element fallback), the initial state with the first elements."""

    def __init__(self, node: Node, state_spec: Any, state: Any) -> None:
        self.inputs = (node,)
        self.state_spec, self.state = state_spec, state

    def element_spec(self) -> Any:
        return (self.state_spec, self.inputs[0].element_spec())

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.inputs[0].iterate(peek):
            yield (self.state, element)


def _check_state(new_spec: Any, state_spec: Any, op: str, expected: str) -> None:
    """TF's checks of a new state against the state.

    Raises:
      TypeError: a dtype differs (TF's message, ``expected`` joining the two dtype texts).
      InvalidArgumentError: the component counts differ (TF's kernel error).
    """
    new, old = nest.flatten(new_spec), nest.flatten(state_spec)
    if any(a.dtype != b.dtype for a, b in zip(new, old, strict=False)):
        raise TypeError(expected.format(_dtype_text(state_spec), _dtype_text(new_spec)))
    if len(new) != len(old):
        raise errors.InvalidArgumentError(
            None,
            op,
            f"The number of components of the initial state and the {op_function(op)} output "
            f"does not match. (initial_state={len(old)}, output={len(new)}). [Op:{op}]",
        )


def op_function(op: str) -> str:
    return "reduce function" if op == "ReduceDataset" else "scan function"


def state_specs(
    node: Node, func: Callable[..., Any], state: Any, op: str, expected: str
) -> tuple[Any, Any]:
    """``(state spec, result spec)`` of ``func(state, element)`` as TF traces it: the result
    inferred on probes; while the new state's shapes differ from the state's, the state's are
    relaxed and the function inferred again.

    Raises:
      Exception: what ``func`` raises on a probe and on the first real element; TF's state
        errors (:func:`_check_state`, and for ``scan`` a result that is not a pair).
    """
    state_spec = _structure.spec_of(state)
    for _ in range(8):  # each round makes at least one more dim unknown
        probe = _functions.Map(_StateAndInput(node, state_spec, state), func)
        result = probe.element_spec()
        if op == "ScanDataset":
            if not isinstance(result, tuple) or len(result) != 2:
                raise TypeError(
                    "Invalid `scan_func`. `scan_func` should return a pair consisting of new "
                    f"state and the output value but its return type is {tf_spec_text(result)}."
                )
            new_spec = result[0]
        else:
            new_spec = result
        _check_state(new_spec, state_spec, op, expected)
        flat = [
            TensorSpec(
                [a if a == b else None for a, b in zip(s.shape, n.shape, strict=True)], s.dtype
            )
            if len(s.shape) == len(n.shape)
            else TensorSpec([None] * len(s.shape), s.dtype)
            for s, n in zip(nest.flatten(state_spec), nest.flatten(new_spec), strict=True)
        ]
        relaxed = nest.pack_sequence_as(state_spec, flat)
        if relaxed == state_spec:
            return state_spec, result
        state_spec = relaxed
    return state_spec, result


def _step(func: Callable[..., Any], state: Any, element: Any) -> Any:
    return _structure.normalize_result(func(state, element))


def _as_state(value: Any, state: Any) -> Any:
    """A new state (any structure with the state's components) in the state's structure."""
    return nest.pack_sequence_as(state, nest.flatten(value))


_SCAN_TYPES = (
    "Invalid `scan_func`. The element types for the new state must match the initial state. "
    "Expected {}, got {}."
)
REDUCE_TYPES = (
    "The element types for the new state must match the initial state. Expected {} but got {}."
)


class Scan(Node):
    """``scan_func(state, element) -> (new_state, output)`` over the input; the outputs are the
    elements (as many as the input's: TF's ``preserve_cardinality``)."""

    def __init__(self, node: Node, state: Any, func: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.state, self.func = state, func
        self.state_spec, result = state_specs(node, func, state, "ScanDataset", _SCAN_TYPES)
        self._spec = result[1]

    def element_spec(self) -> Any:
        return self._spec

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        state = self.state
        for element in self.inputs[0].iterate(peek):
            new_state, output = _step(self.func, state, element)
            state = _as_state(new_state, self.state)
            yield output


def reduce(node: Node, state: Any, func: Callable[..., Any]) -> Any:
    """``reduce_func`` folded over the elements from ``state``: the final state, in the
    initial state's structure."""
    state_specs(node, func, state, "ReduceDataset", REDUCE_TYPES)
    for element in node.iterate():
        state = _as_state(_step(func, state, element), state)
    return state


class TakeWhile(Node):
    """The elements until ``predicate`` is first false (TF's ``compute_batch_size`` stops
    here: -1)."""

    def __init__(self, node: Node, predicate: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.predicate = predicate
        probe = _functions.Map(node, predicate)
        try:
            spec = probe.element_spec()
        except Exception:  # not known without running: checked on every element instead
            return
        _check_predicate(spec)

    def cardinality(self) -> int:
        return UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.inputs[0].iterate(peek):
            call = self.predicate(*element) if type(element) is tuple else self.predicate(element)
            keep = _structure.normalize_result(call)
            _check_predicate(_structure.spec_of(keep))
            if not keep:
                return
            yield element


def _check_predicate(spec: Any) -> None:
    """TF's check of a ``take_while`` predicate's result spec.

    Raises:
      AttributeError: a tuple or dict (TF asks it ``is_compatible_with``).
      ValueError: not a bool scalar.
    """
    if not isinstance(spec, TensorSpec):
        kind = "dict" if isinstance(spec, abc.Mapping) else "tuple"
        raise AttributeError(f"'{kind}' object has no attribute 'is_compatible_with'")
    if spec.dtype != np.bool_ or spec.shape != ():
        raise ValueError(
            "Invalid `predicate`. `predicate` must return a `tf.bool` scalar tensor but its "
            f"return type is{tf_spec_text(spec)}."
        )


class Unique(Node):
    """The first occurrence of every distinct element (equal shape and values) of a
    one-component dataset of int32, int64 or strings (TF's ``compute_batch_size`` stops here:
    -1)."""

    def __init__(self, node: Node) -> None:
        self.inputs = (node,)
        flat = nest.flatten(node.element_spec())
        for spec in flat:
            if spec.dtype not in (np.int32, np.int64) and spec.dtype.kind not in "SUO":
                raise TypeError(
                    "`tf.data.Dataset.unique` does not support type <dtype: "
                    f"'{tf_api_dtype_name(spec.dtype)}'> -- only `tf.int32`, `tf.int64`, and "
                    "`tf.string` are supported."
                )
        if len(flat) != 1:
            raise errors.InvalidArgumentError(
                None,
                "UniqueDataset",
                "UniqueDataset only supports inputs with a single component. [Op:UniqueDataset]",
            )

    def cardinality(self) -> int:
        return UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        seen: set[Any] = set()
        for element in self.inputs[0].iterate(peek):
            array = nest.flatten(element)[0]
            value = tuple(array.ravel().tolist()) if array.dtype.kind == "O" else array.tobytes()
            key = (array.shape, array.dtype.str, value)
            if key not in seen:
                seen.add(key)
                yield element


def single_element(node: Node) -> Any:
    """The dataset's only element.

    Raises:
      InvalidArgumentError: the dataset is empty or has more than one element (TF's).
    """
    elements = node.iterate()
    first = next(elements, _END)
    if first is _END:
        raise _single_error("Dataset was empty.")
    if next(elements, _END) is not _END:
        raise _single_error("Dataset had more than one element.")
    return first


def _single_error(message: str) -> errors.InvalidArgumentError:
    op = "DatasetToSingleElement"
    return errors.InvalidArgumentError(None, op, f"{message} [Op:{op}]")


_END = object()
