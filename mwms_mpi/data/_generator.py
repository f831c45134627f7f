"""``Dataset.from_generator``: its source node and TF 2.21's checks of its arguments and of
every element the generator yields (``dataset_ops.from_generator``'s ``generator_py_func``)."""

from __future__ import annotations

from collections import abc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi.data._pipeline import UNKNOWN, Node
from mwms_mpi.data.tensor_spec import TensorSpec


class Generator(Node):
    """The elements of ``generator(*args)``, called anew for every iteration (an epoch, a
    ``repeat``), each converted to ``spec`` and copied (TF copies them into tensors, so a
    generator may reuse its buffers)."""

    def __init__(self, generator: Callable[..., Any], args: tuple[Any, ...], spec: Any) -> None:
        self.generator, self.args, self.spec = generator, args, spec

    def element_spec(self) -> Any:
        return self.spec

    def cardinality(self) -> int:
        return UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for value in self.generator(*self.args):
            yield _element(value, self.spec)


def signature(generator: Any, output_types: Any, output_shapes: Any, output_signature: Any) -> Any:
    """The element spec ``from_generator`` gets, checked as TF checks its arguments.

    Raises:
      TypeError: TF's messages (no callable; neither or both of ``output_types`` and
        ``output_signature``; a signature leaf that is not a ``TensorSpec``).
      ValueError: ``output_types`` without ``output_shapes``: TF gives specs of unknown rank,
        which mwms_mpi's specs cannot hold (distribution reads ranks from them).
    """
    if not callable(generator):
        raise TypeError("`generator` must be a Python callable.")
    if output_signature is not None:
        if output_types is not None:
            raise TypeError(
                "The `output_types` argument can not be used together with the "
                "`output_signature` argument."
            )
        if output_shapes is not None:
            raise TypeError(
                "The `output_shapes` argument can not be used together with the "
                "`output_signature` argument."
            )
        for spec in nest.flatten(output_signature):
            if not isinstance(spec, TensorSpec):
                raise TypeError(
                    "`output_signature` must contain objects that are subclass of "
                    f"`tf.TypeSpec` but found {type(spec)} which is not."
                )
        return output_signature
    if output_types is None:
        raise TypeError(
            "To specify the output signature you need to provide either the "
            "`output_signature` argument or the `output_types` argument."
        )
    if output_shapes is None:
        raise ValueError(
            "Dataset.from_generator with `output_types` alone: TF makes element specs of "
            "unknown rank, which mwms_mpi.data cannot represent. Give `output_shapes` (None "
            "for an unknown dimension) or an `output_signature` of TensorSpec."
        )
    return _specs(output_types, output_shapes)


def _specs(types: Any, shapes: Any) -> Any:
    """``TensorSpec`` of each dtype in ``types`` and the shape at the same place in ``shapes``
    (TF's ``map_structure_up_to(output_types, ...)``: a shape is a leaf there)."""
    if isinstance(types, abc.Mapping):
        specs = [(key, _specs(types[key], shapes[key])) for key in types]
        return dict(specs) if type(types) is dict else type(types)(specs)  # type: ignore[call-arg]
    if isinstance(types, tuple | list):
        parts = [_specs(t, s) for t, s in zip(types, shapes, strict=True)]
        return type(types)(*parts) if hasattr(types, "_fields") else type(types)(parts)
    return TensorSpec(() if shapes is None else shapes, types)


def _error(message: str) -> errors.InvalidArgumentError:
    """TF raises the generator's ``TypeError`` through the iterator as this."""
    return errors.InvalidArgumentError(None, "IteratorGetNext", f"TypeError: {message}")


def _leaves(spec: Any, value: Any) -> list[Any]:
    """``value``'s components at ``spec``'s leaves (TF's ``flatten_up_to``: a list below a
    leaf is one component; containers must be of the spec's types and sizes).

    Raises:
      TypeError: ``value`` does not have ``spec``'s structure.
    """
    if isinstance(spec, TensorSpec):
        return [value]
    if isinstance(spec, abc.Mapping):
        if not isinstance(value, abc.Mapping) or set(value) != set(spec):
            raise TypeError("structure")
        return [leaf for key in sorted(spec) for leaf in _leaves(spec[key], value[key])]
    if type(value) is not type(spec) or len(value) != len(spec):
        raise TypeError("structure")
    return [leaf for s, v in zip(spec, value, strict=True) for leaf in _leaves(s, v)]


def _element(value: Any, spec: Any) -> Any:
    """One yielded value as an element of ``spec``: each component ``np.array(component,
    dtype)`` (TF's ``FuncRegistry._convert``, numpy's casting), of a compatible shape.

    Raises:
      InvalidArgumentError: TF's messages for a structure, conversion or shape mismatch.
    """
    try:
        components = _leaves(spec, value)
    except TypeError:
        types = nest.map_structure(lambda s: s.dtype, spec)
        raise _error(
            "`generator` yielded an element that did not match the expected structure. The "
            f"expected structure was {types}, but the yielded element was {value}."
        ) from None
    arrays = []
    for component, leaf in zip(components, nest.flatten(spec), strict=True):
        try:
            array = np.array(component, dtype=leaf.dtype, order="C", copy=True)
        except (TypeError, ValueError):
            raise _error(
                "`generator` yielded an element that could not be converted to the expected "
                f"type. The expected type was {leaf.dtype.name}, but the yielded element was "
                f"{component}."
            ) from None
        if len(array.shape) != len(leaf.shape) or any(
            d is not None and d != n for d, n in zip(leaf.shape, array.shape, strict=True)
        ):
            raise _error(
                f"`generator` yielded an element of shape {array.shape} where an element of "
                f"shape {leaf.shape} was expected."
            )
        arrays.append(array)
    return nest.pack_sequence_as(spec, arrays)
