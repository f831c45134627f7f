"""The shuffle node: TF's buffered shuffle, over elements or over a source's row indices."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi.data._pipeline import UNKNOWN, Node


class Shuffle(Node):
    preserves_batch = True

    def __init__(self, node: Node, buffer_size: int, seed: int, reshuffle: bool) -> None:
        self.inputs = (node,)
        self.buffer_size = buffer_size  # UNKNOWN: the whole input
        self.seed = seed
        self.reshuffle = reshuffle
        self.epochs = 0

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        return self._shuffled(lambda: self.inputs[0].iterate(peek), peek)

    def row_source(self, peek: bool = False) -> tuple[Any, Iterator[int]] | None:
        source = self.inputs[0].row_source(peek)
        if source is None:
            return None
        element, indices = source
        return element, self._shuffled(lambda: indices, peek)

    def _shuffled(self, upstream: Callable[[], Iterator[Any]], peek: bool) -> Iterator[Any]:
        """What ``upstream()`` yields (elements, or row indices: the same draws either way),
        in this epoch's order; ``upstream`` is called at the first ``next``, as before.

        The runs of :meth:`_runs` are chained in C: a generator resumed per element was most
        of a batch's input time once batches were gathered by index.
        """
        return itertools.chain.from_iterable(self._runs(upstream, peek))

    def _runs(self, upstream: Callable[[], Iterator[Any]], peek: bool) -> Iterator[list[Any]]:
        """The shuffled order in runs: one element per draw while the buffer is full and
        elements keep coming (TF's buffered shuffle), then the whole drained buffer at once."""
        epoch = self.epochs if self.reshuffle else 0
        if self.reshuffle and not peek:
            self.epochs += 1
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch])))
        source = upstream()
        if self.buffer_size == UNKNOWN:
            buffer = list(source)
        else:
            buffer = list(itertools.islice(source, self.buffer_size))
            for element in source:
                index = int(rng.integers(len(buffer)))
                yield [buffer[index]]
                buffer[index] = element
        # The drain's draws, len(buffer) down to 1, at once: the same numbers as one draw at a
        # time (numpy draws an array of bounds in order; tests/unit/test_data_gather.py checks
        # it), without a Generator call per element.
        drained = []
        for index in rng.integers(np.arange(len(buffer), 0, -1)).tolist():
            buffer[index], buffer[-1] = buffer[-1], buffer[index]
            drained.append(buffer.pop())
        yield drained
