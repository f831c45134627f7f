"""TF's random streams for ``Dataset.random`` and ``Dataset.sample_from_datasets``, bit for bit.

TF 2.21's ``RandomDataset`` yields the uint32 outputs of ``random::PhiloxRandom`` (Philox4x32-10,
key = ``seed``, counter words 2-3 = ``seed2``) one at a time (``SingleSampleAdapter``), as
int64; with ``rerandomize_each_iteration`` each iteration takes its ``(seed, seed2)`` from a
``RandomSeedGenerator``: two more outputs of a Philox stream of the dataset's seeds.
``sample_from_datasets`` draws each choice with ``StatelessMultinomial`` seeded by a pair of those
values: its key and counter come from one Philox block of the seed (``GenerateKey``), the sample
is ``upper_bound`` of a uniform double (``Uint64ToDouble`` of two outputs) times the total in the
unnormalized cdf of ``exp(logits - max)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mwms_mpi.data._arguments import int_arg
from mwms_mpi.data._pipeline import INFINITE, UNKNOWN, Node
from mwms_mpi.data.tensor_spec import TensorSpec

_MASK = 0xFFFFFFFF
_DEFAULT_GRAPH_SEED = 87654321  # TF's random_seed.DEFAULT_GRAPH_SEED
_MAXINT32 = 2**31 - 1


def philox(counter: list[int], key: list[int]) -> list[int]:
    """One Philox4x32-10 block (TF's ``PhiloxRandom::operator()`` without the skip)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & _MASK, (p0 >> 32) ^ c3 ^ k1, p0 & _MASK
        if round_ < 9:
            k0, k1 = (k0 + 0x9E3779B9) & _MASK, (k1 + 0xBB67AE85) & _MASK
    return [c0, c1, c2, c3]


_MULTIPLIERS = np.array([[[0xD2511F53]], [[0xCD9E8D57]]], np.uint64)
_LOW = 0 if np.little_endian else 1  # where a uint64's low word sits in its uint32 view


def philox_outputs(seeds: list[tuple[int, int]], first: int, blocks: int) -> np.ndarray:
    """The uint32 outputs of blocks ``first .. first + blocks - 1`` of ``PhiloxRandom(seed,
    seed2)`` for each pair of ``seeds``: one row per pair, ``Stream``'s order (4 per block).

    Philox is counter-based, so every block of every stream is computed at once: a shuffle's
    draws need no Python call per value, and several epochs' streams share the numpy calls. A
    round's two products are one multiply of the stacked words 0 and 2; their high and low
    halves are views of it, so a round is three numpy calls whatever the size.
    """
    pairs = [(seed & 2**64 - 1, seed2 & 2**64 - 1) for seed, seed2 in seeds]
    index = np.uint64(first) + np.arange(blocks, dtype=np.uint64)  # counter words 0-1
    lanes = (len(pairs), blocks)
    even = np.empty((2, *lanes), np.uint32)  # counter words 0 and 2
    odd = np.empty((2, *lanes), np.uint32)  # counter words 1 and 3
    even[0], odd[0] = index & np.uint64(_MASK), index >> np.uint64(32)
    even[1] = np.array([[seed2 & _MASK] for _, seed2 in pairs], np.uint32)
    odd[1] = np.array([[seed2 >> 32] for _, seed2 in pairs], np.uint32)
    keys = np.array([[[s & _MASK] for s, _ in pairs], [[s >> 32] for s, _ in pairs]], np.uint64)
    bump = np.array([[[0x9E3779B9]], [[0xBB67AE85]]], np.uint64)
    for round_ in range(10):
        halves = (_MULTIPLIERS * even).view(np.uint32)  # [p0, p1], each word (low, high)
        round_keys = ((keys + np.uint64(round_) * bump) & np.uint64(_MASK)).astype(np.uint32)
        even = halves[::-1, :, 1 - _LOW :: 2] ^ odd ^ round_keys  # [hi(p1)^c1^k0, hi(p0)^c3^k1]
        odd = halves[::-1, :, _LOW::2]  # [lo(p1), lo(p0)]
    return np.stack([even[0], odd[0], even[1], odd[1]], axis=2).reshape(len(pairs), -1)


class Stream:
    """TF's ``SingleSampleAdapter<PhiloxRandom>``: uint32 values one by one."""

    def __init__(self, key: list[int], counter: list[int]) -> None:
        self.key = key
        self.counter = list(counter)
        self.block: list[int] = []

    @classmethod
    def seeded(cls, seed: int, seed2: int) -> Stream:
        """``PhiloxRandom(seed, seed2)``: the key from ``seed``, counter words 2-3 from
        ``seed2``."""
        seed, seed2 = seed & 2**64 - 1, seed2 & 2**64 - 1
        return cls([seed & _MASK, seed >> 32], [0, 0, seed2 & _MASK, seed2 >> 32])

    def skip(self, blocks: int) -> None:
        """TF's ``PhiloxRandom::Skip``: the counter (128 bits) moves ``blocks`` on."""
        value = sum(word << (32 * i) for i, word in enumerate(self.counter)) + blocks
        self.counter = [(value >> (32 * i)) & _MASK for i in range(4)]
        self.block = []

    def __call__(self) -> int:
        if not self.block:
            self.block = philox(self.counter, self.key)
            self.counter[0] = (self.counter[0] + 1) & _MASK
            if self.counter[0] == 0:
                self.counter[1] = (self.counter[1] + 1) & _MASK
            self.block.reverse()
        return self.block.pop()


def op_seeds(seed: Any) -> tuple[int, int] | None:
    """TF's ``random_seed.get_seed(seed)`` without a global seed: ``(DEFAULT_GRAPH_SEED, seed
    mod (2**31 - 1))``, or None (TF's random seeds) for no seed.

    Raises:
      TypeError: a seed that is not an integer (TF's messages).
    """
    if seed is None:
        return None
    truncated = seed % _MAXINT32  # TF's _truncate_seed, before any conversion
    return _DEFAULT_GRAPH_SEED, int_arg(truncated, "RandomDataset")


class Random(Node):
    """TF's ``RandomDataset``: an endless stream of int64 values in ``[0, 2**32)``."""

    def __init__(self, seeds: tuple[int, int] | None, rerandomize: bool) -> None:
        if seeds is None:  # TF draws its own; nothing reproduces them
            drawn = np.random.SeedSequence().generate_state(2, np.uint64)
            seeds = int(drawn[0]), int(drawn[1])
        self.seeds = seeds
        self.rerandomize = rerandomize
        self.generator = Stream.seeded(*seeds)  # RandomSeedGenerator, shared by iterations

    def element_spec(self) -> Any:
        return TensorSpec((), np.int64)

    def cardinality(self) -> int:
        return INFINITE

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        seeds = self.seeds
        if self.rerandomize and not peek:
            seeds = self.generator(), self.generator()
        stream = Stream.seeded(*seeds)
        while True:
            yield np.asarray(stream(), np.int64)


def stateless_categorical(logits: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """One sample of TF's ``StatelessMultinomial(logits[None], 1, seed)`` as an int64 scalar
    (``logits`` one row, float32 or float64; non-finite logits never chosen)."""
    seed0, seed1 = (int(s) & 2**64 - 1 for s in seed)
    counter = [seed0 & _MASK, seed0 >> 32, seed1 & _MASK, seed1 >> 32]
    mix = philox(counter, [0x3EC8F720, 0x02461E29])  # GenerateKey
    stream = Stream([mix[0], mix[1]], [0, 0, mix[2], mix[3]])
    finite = np.isfinite(logits)
    top = float(logits[finite].max()) if finite.any() else float(np.finfo(logits.dtype).min)
    weights = np.exp(logits.astype(np.float64) - top)
    cdf = np.cumsum(np.where(finite, weights, 0.0))  # sequential: TF's running total
    x0, x1 = stream(), stream()
    bits = np.asarray(((1023 << 52) | ((x0 & 0xFFFFF) << 32) | x1), np.uint64)
    uniform = float(bits.view(np.float64)) - 1.0  # Uint64ToDouble
    return np.asarray(np.searchsorted(cdf, uniform * cdf[-1], side="right"), np.int64)


def uniform_float32(stream: Stream) -> np.float32:
    """TF's ``Uint32ToFloat`` of the next value: a float32 in ``[0, 1)``."""
    bits = np.asarray((127 << 23) | (stream() & 0x7FFFFF), np.uint32)
    return np.float32(bits.view(np.float32) - np.float32(1.0))


class Accept(Node):
    """``rejection_resample``'s filter: ``(class, p, data)`` elements kept where TF's stateful
    ``random_uniform([], seed)`` is below ``p``. That kernel (one per iteration) reserves 256
    Philox blocks per call (``ReserveRandomOutputs(1, 256)``) and uses the first value."""

    preserves_batch = True

    def __init__(self, node: Node, seeds: tuple[int, int] | None) -> None:
        self.inputs = (node,)
        self.seeds = seeds

    def cardinality(self) -> int:
        return UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        seeds = self.seeds
        if seeds is None:
            drawn = np.random.SeedSequence().generate_state(2, np.uint64)
            seeds = int(drawn[0]), int(drawn[1])
        base = Stream.seeded(*seeds)
        for calls, element in enumerate(self.inputs[0].iterate(peek)):
            stream = Stream(base.key, base.counter)
            stream.skip(256 * calls)
            if uniform_float32(stream) < element[1]:
                yield element
