"""Datasets made of the datasets a function returns: ``Dataset.flat_map`` and
``Dataset.interleave`` (TF 2.21's ``FlatMapDataset`` and ``InterleaveDataset``).

The element spec is the returned datasets' spec, inferred as ``map``'s is (the function run on
probe inputs, ``_functions``). The cardinality is unknown, as TF's, whatever the input's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from mwms_mpi.data import _functions
from mwms_mpi.data._pipeline import UNKNOWN, Node


def default_cycle_length() -> int:
    """TF's ``cycle_length`` for ``AUTOTUNE`` (the default): ``port::MaxParallelism()``, the
    CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _dataset_result(result: Any) -> Any:
    """``result`` if it is a dataset (anything with a pipeline node), else TF's error.

    Raises:
      TypeError: a tuple, list or dict (TF: "must return a `Dataset` object").
      AttributeError: anything else, which TF converts to a tensor before failing so.
    """
    if hasattr(result, "_node") and hasattr(result, "element_spec"):
        return result
    if isinstance(result, tuple | list | dict):
        kind = dict if isinstance(result, dict) else tuple  # a returned list is a tuple in TF
        raise TypeError(f"The `map_func` argument must return a `Dataset` object. Got {kind!r}.")
    raise AttributeError("'Tensor' object has no attribute '_name'")


class FlatMap(_functions.Map):
    """Every element of ``func(element)``'s dataset, input element by input element."""

    def __init__(self, node: Node, func: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.func = func
        self._spec = None
        try:  # TF traces the function here: a result that is no dataset fails at the call
            result = self.func_result(_functions._probe(node.element_spec(), 2))
        except Exception:
            return
        _dataset_result(result)

    def func_result(self, element: Any) -> Any:
        return self.func(*element) if type(element) is tuple else self.func(element)

    def call(self, element: Any) -> Any:
        return _dataset_result(self.func_result(element))

    def result_spec(self, element: Any) -> Any:
        return self.call(element).element_spec

    def cardinality(self) -> int:
        return UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.inputs[0].iterate(peek):
            yield from self.call(element)._node.iterate(peek)


class Interleave(FlatMap):
    """TF's ``InterleaveDataset`` order: ``cycle_length`` open datasets, ``block_length``
    elements from each in turn; an exhausted one frees its slot, which the next input element
    fills when the cycle comes back to it (while the input lasts)."""

    def __init__(
        self, node: Node, func: Callable[..., Any], cycle_length: int, block_length: int
    ) -> None:
        super().__init__(node, func)
        self.cycle_length = cycle_length
        self.block_length = block_length

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        inputs = self.inputs[0].iterate(peek)
        slots: list[Iterator[Any] | None] = [None] * self.cycle_length
        index = block = is_open = 0
        input_done = False
        while not input_done or is_open:
            current = slots[index]
            if current is not None:
                element = next(current, _END)
                if element is not _END:
                    block += 1
                    if block == self.block_length:
                        index, block = (index + 1) % self.cycle_length, 0
                    yield element
                    continue
                slots[index] = None
                is_open -= 1
                index, block = (index + 1) % self.cycle_length, 0
            elif not input_done:
                source = next(inputs, _END)
                if source is _END:
                    input_done = True
                else:
                    slots[index] = self.call(source)._node.iterate(peek)
                    is_open += 1
            else:
                index, block = (index + 1) % self.cycle_length, 0


_END = object()
