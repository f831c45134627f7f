"""The shuffle node: TF 2.21's ``ShuffleDatasetOp`` order, over elements or a source's row indices.

TF's iterator keeps a buffer of ``buffer_size`` elements (``UNKNOWN_CARDINALITY``: all of them);
each ``GetNext`` first refills it from the input, then takes ``Random() % n`` (``n`` elements
buffered, ``Random()`` the next uint32 of ``SingleSampleAdapter<PhiloxRandom>(seed, seed2)``) as
an offset from the buffer's oldest element, yields that element and moves the oldest one into
its place. Each iteration's ``(seed, seed2)`` comes from the dataset's seed generator, shared by
every iterator of the dataset (``repeat``'s epochs, re-iterating it): with
``reshuffle_each_iteration`` a ``RandomSeedGenerator`` (two more outputs of a Philox stream of
the op's seeds per iteration), without it a ``FixedSeedGenerator`` (the op's seeds each time).
TF fuses ``shuffle(...).repeat()`` into ``ShuffleAndRepeatDataset``, which buffers across
epochs but draws from the oldest epoch only and takes new seeds per epoch: the same order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from mwms_mpi.data._pipeline import UNKNOWN, Node
from mwms_mpi.data._random import Stream, philox, philox_outputs

_CHUNK = 256  # Philox blocks (4 draws each) computed per numpy call while elements stream in
_AHEAD = 8  # reshuffled epochs whose drains are computed together
_AHEAD_VALUES = 2**22  # at most this many draws computed ahead (16 MiB)
_END = object()
Blocks = Callable[[int, int], np.ndarray]  # (first block, blocks) -> their uint32 outputs


class _Draws:
    """``Random()``'s values for one iteration, in TF's order. The first block is computed in
    Python: a buffer that never fills again (its input ended) needs a numpy call only for its
    drain, and a numpy Philox costs about the same per call whatever its length."""

    def __init__(self, seeds: tuple[int, int], blocks: Blocks) -> None:
        stream = Stream.seeded(*seeds)
        self.first = philox(stream.counter, stream.key)
        self.blocks = blocks
        self.computed = 0  # blocks computed so far
        self.pending: list[int] = []  # computed, not yet used
        self.used = 0

    def next_chunk(self) -> list[int]:
        """The unused computed values, or the next chunk of them."""
        if self.used == len(self.pending):
            if self.computed:
                self.pending = self.blocks(self.computed, _CHUNK).tolist()
                self.computed += _CHUNK
            else:
                self.pending, self.computed = self.first, 1
            self.used = 0
        return self.pending

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` values."""
        if not self.computed:
            self.next_chunk()
        left = self.pending[self.used :]
        need = count - len(left)
        if need <= 0:
            self.used += count
            return np.array(left[:count], np.uint64)
        blocks = -(-need // 4)
        fresh = self.blocks(self.computed, blocks)
        self.computed += blocks
        self.pending, self.used = fresh[need:].tolist(), 0
        return np.concatenate([np.array(left, np.uint64), fresh[:need]])


class Shuffle(Node):
    preserves_batch = True

    def __init__(
        self, node: Node, buffer_size: int, seeds: tuple[int, int] | None, reshuffle: bool
    ) -> None:
        self.inputs = (node,)
        self.buffer_size = buffer_size  # UNKNOWN: the whole input
        if seeds is None:  # TF's (0, 0): seeds drawn at random; nothing reproduces them
            drawn = np.random.SeedSequence().generate_state(2, np.uint64)
            seeds = int(drawn[0]), int(drawn[1])
        self.seeds = seeds
        self.reshuffle = reshuffle
        self.epochs = 0  # iterations the seed generator has served
        # iteration (-1: every one, without reshuffle) -> (first block, outputs from it)
        self.ahead: dict[int, tuple[int, np.ndarray]] = {}

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        return self._shuffled(lambda: self.inputs[0].iterate(peek), peek)

    def row_source(self, peek: bool = False) -> tuple[Any, Iterator[int]] | None:
        source = self.inputs[0].row_source(peek)
        if source is None:
            return None
        element, indices = source
        return element, self._shuffled(lambda: indices, peek)

    def _seeds_of(self, iteration: int) -> tuple[int, int]:
        """The ``GenerateSeeds`` of the ``iteration``-th iterator: ``RandomSeedGenerator``'s
        outputs ``2k`` and ``2k + 1``, or the op's seeds (``FixedSeedGenerator``)."""
        if iteration < 0:
            return self.seeds
        stream = Stream.seeded(*self.seeds)
        stream.skip(iteration // 2)
        if iteration % 2:
            stream(), stream()
        return stream(), stream()

    def _blocks(self, iteration: int, first: int, count: int) -> np.ndarray:
        """Blocks ``first ..`` of the ``iteration``-th stream. A drain of a reshuffled epoch
        also computes the next epochs' (as long, starting where it does: the usual
        ``repeat``), so that one numpy Philox serves several epochs."""
        for past in [k for k in self.ahead if 0 <= k < iteration]:  # iterations left early
            del self.ahead[past]
        cached = self.ahead.pop(iteration, None)
        if cached is not None and cached[0] == first and cached[1].size >= 4 * count:
            if iteration < 0:
                self.ahead[iteration] = cached
            return cached[1][: 4 * count]
        ahead = 1 if iteration < 0 else max(1, min(_AHEAD, _AHEAD_VALUES // (4 * count + 1)))
        rows = philox_outputs([self._seeds_of(iteration + j) for j in range(ahead)], first, count)
        for j in range(1 if iteration >= 0 else 0, ahead):
            self.ahead[iteration + j] = (first, rows[j])
        return rows[0]

    def _draws(self, peek: bool) -> _Draws:
        """This iteration's draws (a peek takes the next iteration's without using it up)."""
        iteration = self.epochs if self.reshuffle else -1
        if self.reshuffle and not peek:
            self.epochs += 1
        return _Draws(self._seeds_of(iteration), partial(self._blocks, iteration))

    def _shuffled(self, upstream: Callable[[], Iterator[Any]], peek: bool) -> Iterator[Any]:
        """What ``upstream()`` yields (elements, or row indices: the same draws either way),
        in this iteration's order; ``upstream`` is called at the first ``next``, as before.

        The runs of :meth:`_runs` are chained in C: a generator resumed per element was most
        of a batch's input time once batches were gathered by index.
        """
        return itertools.chain.from_iterable(self._runs(upstream, peek))

    def _runs(self, upstream: Callable[[], Iterator[Any]], peek: bool) -> Iterator[list[Any]]:
        """The shuffled order in runs: one element per draw while the input lasts (each draw
        is made before the next element is read, as TF refills before it draws), then the
        whole drained buffer at once.

        ``buffer[start:]`` is TF's ring buffer unrolled: the oldest element first.
        """
        draws = self._draws(peek)
        source = upstream()
        if self.buffer_size == UNKNOWN:
            buffer = list(source)
        else:
            buffer = list(itertools.islice(source, self.buffer_size))
        start, size = 0, len(buffer)
        if size == self.buffer_size:
            values, used = draws.next_chunk(), draws.used
            while True:
                if used == len(values):
                    draws.used = used
                    values, used = draws.next_chunk(), draws.used
                index = start + values[used] % size
                used += 1
                element = buffer[index]
                buffer[index] = buffer[start]
                start += 1
                yield [element]
                following = next(source, _END)
                if following is _END:
                    break
                buffer.append(following)
                if start > size:  # drop the consumed head now and then
                    del buffer[:start]
                    start = 0
            draws.used = used
        # The drain: the k-th draw swaps the oldest element with the chosen one (``offset``
        # past it) and yields the chosen one, so the drained order is the buffer's, left in place
        left = len(buffer) - start
        if left:
            bounds = np.arange(left, 0, -1, dtype=np.uint64)
            ends = np.arange(start, start + left, dtype=np.uint64)
            chosen = (draws.take(left) % bounds + ends).tolist()
            for oldest, index in zip(range(start, start + left), chosen, strict=True):
                buffer[oldest], buffer[index] = buffer[index], buffer[oldest]
            yield buffer[start:]
