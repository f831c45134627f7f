"""Hypothesis property tests of the collectives under MPI, at any world size.

Every rank draws the same examples (the ``mwms`` profile in conftest: derandomized, no example
database), builds its data from (example, rank), and checks the result against a serial numpy
reference of every rank's contribution. Pass/fail is agreed across ranks before asserting, so
all ranks fail, and shrink, together.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwms_mpi.collective import Communicator, Op
from mwms_mpi.types import CommunicationOptions
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference

pytestmark = pytest.mark.mpi

NUMERIC = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "complex64",
    "complex128",
]
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@st.composite
def reductions(draw: Any) -> tuple[Op, list[tuple[tuple[int, ...], str]]]:
    op = draw(st.sampled_from([Op.SUM, Op.MAX, Op.MIN]))
    allowed = [d for d in NUMERIC if op is Op.SUM or not d.startswith("complex")]
    if op is not Op.SUM:
        allowed.append("bool")
    batch = draw(st.lists(st.tuples(shapes, st.sampled_from(allowed)), min_size=1, max_size=8))
    return op, batch


@pytest.fixture(scope="module")
def comm() -> Iterator[Communicator]:
    c = Communicator(name="properties")
    yield c
    c.close()


def _check(test_comm: Any, comm: Communicator, got: list, want: list) -> None:
    ok = len(got) == len(want) and all(
        g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
        for g, w in zip(got, want, strict=False)
    )
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got} != {want}"


@given(reductions(), st.sampled_from([0, 1, 32, 4096]), st.integers(0, 3))
def test_batch_all_reduce_equals_numpy(
    comm: Communicator, test_comm: Any, case: tuple, bytes_per_pack: int, seed: int
) -> None:
    op, batch = case
    everyone = [
        [rank_array(s, d, r, seed + i) for i, (s, d) in enumerate(batch)] for r in range(comm.size)
    ]
    options = CommunicationOptions(bytes_per_pack=bytes_per_pack)
    got = comm.batch_all_reduce(everyone[comm.rank], op, options)
    want = [reduce_reference(op, [e[i] for e in everyone]) for i in range(len(batch))]
    _check(test_comm, comm, got, want)


@given(reductions(), st.integers(0, 3))
def test_all_reduce_equals_numpy(
    comm: Communicator, test_comm: Any, case: tuple, seed: int
) -> None:
    op, batch = case
    shape, dtype = batch[0]
    everyone = [rank_array(shape, dtype, r, seed) for r in range(comm.size)]
    _check(
        test_comm,
        comm,
        [comm.all_reduce(everyone[comm.rank], op)],
        [reduce_reference(op, everyone)],
    )


@given(shapes.filter(lambda s: len(s) >= 1), st.sampled_from([*NUMERIC, "bool"]), st.data())
def test_all_gather_uneven_equals_concatenate(
    comm: Communicator, test_comm: Any, shape: tuple, dtype: str, data: Any
) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=comm.size, max_size=comm.size))

    def part(r: int) -> np.ndarray:
        s = list(shape)
        s[axis] = sizes[r]
        return rank_array(tuple(s), dtype, r)

    got = comm.all_gather(part(comm.rank), axis=axis)
    want = np.concatenate([part(r) for r in range(comm.size)], axis=axis)
    _check(test_comm, comm, [got], [want])
