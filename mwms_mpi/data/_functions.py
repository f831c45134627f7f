"""Pipeline nodes that run the user's functions (``map``, ``filter``), and how a map's element
spec is inferred without TF's symbolic tracing: by running the function on probe inputs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import nest
from mwms_mpi.data import _structure
from mwms_mpi.data._pipeline import UNKNOWN, Elements, Node
from mwms_mpi.data.tensor_spec import DatasetSpec, TensorSpec


class Map(Node):
    """``map_func`` on every element. Its spec is inferred when the map is made, as TF traces
    the function then, so a function returning no tensor fails at ``map`` as in TF."""

    fuses_into_batch = True  # TF's map_and_batch_fusion: Batch stacks as MapAndBatchDataset

    def __init__(self, node: Node, func: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.func = func
        self._spec: Any = None
        try:  # at the call, as TF traces the function there
            spec = self.element_spec()
        except Exception:  # fails on probes and real elements alike: reported when used
            return
        if not nest.flatten(spec):
            raise _structure.no_components_error("MapDataset", "output_types")

    def call(self, element: Any) -> Any:
        result = self.func(*element) if type(element) is tuple else self.func(element)
        return _structure.normalize_result(result)

    def result_spec(self, element: Any) -> Any:
        """The element spec of what this node makes of one input ``element``."""
        return _structure.spec_of(self.call(element))

    def element_spec(self) -> Any:
        if self._spec is None:
            self._spec = _infer_spec(self)
        return self._spec

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.inputs[0].iterate(peek):
            yield self.call(element)


class Filter(Node):
    preserves_batch = True

    def __init__(self, node: Node, predicate: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.predicate = predicate

    def cardinality(self) -> int:
        return UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.inputs[0].iterate(peek):
            keep = self.predicate(*element) if type(element) is tuple else self.predicate(element)
            keep = _structure.normalize_result(keep)
            if not isinstance(keep, np.ndarray) or keep.dtype != np.bool_ or keep.ndim:
                raise ValueError(
                    "Invalid `predicate`. `predicate` must return a `tf.bool` scalar tensor, but "
                    f"its return type is {_structure.spec_of(keep)}."
                )
            if keep:
                yield element


def _probe(spec: Any, unknown: int, fill: int = 0) -> Any:
    """Probe values of ``spec``: arrays of ``fill``, unknown dims of size ``unknown``; a
    dataset component (``DatasetSpec``) is a dataset of one probe element.

    Raises:
      TypeError: a ``DatasetSpec`` that cannot make a dataset.
    """

    def one(s: Any) -> Any:
        if isinstance(s, DatasetSpec):
            if s.make is None:
                raise TypeError(f"No probe value for {s}.")
            return s.make(Elements([_probe(s.element_spec, unknown, fill)], s.element_spec))
        return np.full([unknown if d is None else d for d in s.shape], fill, s.dtype)

    return nest.map_structure(one, spec)


# (size of unknown dims, fill value) of the probes after the first (2, 0). Sizes 3, 0 and 1
# show the dims that follow an unknown input dim (a slice ``x[:2]`` is 2 only for inputs of 2
# or more rows: TF traces it to None); fills 1 and 2 the dims that follow input values
# (``zeros(x // 2 + 1)``). A dim stays static only where every probe agrees.
_SIZE_PROBES = ((3, 0), (0, 0), (1, 1))
_VALUE_PROBES = ((2, 1), (2, 2))


def _infer_spec(node: Map) -> Any:
    """A map's output spec: the function run on probe inputs, relaxed to the dims on which
    every probe agrees.

    TF traces the function symbolically and knows which dims follow from the input's static
    dims; running it cannot, so a dim is claimed only where probes of other sizes (for unknown
    input dims) and other values agree, and is None otherwise: an element must never contradict
    the spec (distribution reads static batch dims from it). A probe the function cannot take
    is skipped; if the first (zeros) fails, the first real element decides, with every dim
    unknown when the input has unknown dims.
    """
    in_spec = node.inputs[0].element_spec()
    has_unknown = any(None in s.shape for s in nest.flatten(in_spec))
    with np.errstate(all="ignore"):
        try:
            spec = node.result_spec(_probe(in_spec, 2))
        except Exception:  # the function cannot take zeros: use the first real element
            return _real_element_spec(node, has_unknown)
        for unknown, fill in (_SIZE_PROBES if has_unknown else ()) + _VALUE_PROBES:
            try:
                other = node.result_spec(_probe(in_spec, unknown, fill))
                spec = _structure.relax(spec, other)
            except Exception:  # a probe the function refuses tells nothing
                continue
    return spec


def _real_element_spec(node: Map, has_unknown: bool) -> Any:
    """The spec of the map's first real element (peeked: no epoch advances); every dim
    unknown if the input has unknown dims.

    Raises:
      Exception: whatever the function raises on that element (on an empty input: on the
        zeros probe).
    """
    for element in node.inputs[0].iterate(peek=True):
        spec = node.result_spec(element)
        if has_unknown:
            spec = nest.map_structure(lambda s: TensorSpec([None] * len(s.shape), s.dtype), spec)
        return spec
    return node.result_spec(_probe(node.inputs[0].element_spec(), 2))
