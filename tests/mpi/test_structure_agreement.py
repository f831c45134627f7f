"""A value's nested structure is part of every agreement that carries one (issue 23, item 2).

TF flattens a nest and reduces it position by position, so ``{"a": x, "b": y}`` on one worker
and ``{"a": x, "c": y}`` on another sum ``b`` with ``c`` and exit 0. Here every rank raises
``InvalidArgumentError`` naming both structures, and the strategy keeps working. Structures that
flatten alike (dicts whatever their insertion order, as ``tf.nest`` sorts keys) still agree and
give the serial reference's numbers. Runs at any world size (at one rank there is nothing to
disagree with: each program must then give the right numbers), k = 1 and k = 2.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.values import IndexedSlices
from tests.support.mpi import all_ranks_ok, odd_rank, rank_size, replica_id, still_works

pytestmark = pytest.mark.mpi

P = collections.namedtuple("P", ["a", "b"])
Q = collections.namedtuple("Q", ["a", "b"])


def _ctx() -> Any:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return ctx


def _serial_sum(n: int, f: Callable[[int], np.ndarray]) -> np.ndarray:
    return np.sum([f(r) for r in range(n)], axis=0)


def _raises_naming(
    strategy: Any, test_comm: Any, call: Callable[[], Any], texts: list[str], own: Any = None
) -> None:
    """Every rank raises (``InvalidArgumentError``; ``own`` on a rank that found its own
    argument invalid), and each message names every text in ``texts``."""
    rank, size = rank_size()
    if size == 1:
        call()  # nothing to disagree with
        return
    try:
        call()
        outcome = "returned without raising"
    except Exception as exc:  # checked below, on every rank alike
        expected = own if own is not None else errors.InvalidArgumentError
        text = str(exc) + "".join(getattr(exc, "__notes__", []))
        missing = [t for t in texts if t not in text]
        wrong = not isinstance(exc, expected)
        outcome = f"{type(exc).__name__}: {text}" if missing or wrong else ""
    assert all_ranks_ok(test_comm, not outcome), f"rank {rank}: {outcome}"
    still_works(strategy)


# -- item 2, exactly as reported ---------------------------------------------------------------


def test_item2_dict_keys_differ_between_ranks_raise_on_every_rank(
    strategy: Any, test_comm: Any
) -> None:
    # ReplicaContext.all_reduce("SUM", {"a": x, "b": y}) on rank 0, {"a": x, "c": y} on rank 1:
    # TF (and this library before) summed b with c and exited 0.
    rank, size = rank_size()
    y = np.full(3, 2.0, np.float32)

    def fn() -> Any:
        x, y = np.ones(3, np.float32), np.full(3, 2.0, np.float32)  # each replica's own
        value = {"a": x, "b": y} if rank == 0 else {"a": x, "c": y}
        return _ctx().all_reduce("SUM", value)

    if size == 1:
        out = strategy.experimental_local_results(strategy.run(fn))[0]
        n = strategy.num_replicas_in_sync
        assert sorted(out) == ["a", "b"]
        np.testing.assert_array_equal(out["b"], y * n)
        return
    both = ["{'a': ., 'b': .}", "{'a': ., 'c': .}", "ReplicaContext.all_reduce on rank"]
    _raises_naming(strategy, test_comm, lambda: strategy.run(fn), both)


def test_insertion_order_never_matters(strategy: Any, test_comm: Any) -> None:
    rank, _ = rank_size()
    n = strategy.num_replicas_in_sync

    def fn() -> Any:
        r = replica_id()
        a, b = np.full(2, r, np.float32), np.full(3, 10.0 * r, np.float64)
        value = {"a": a, "b": b} if rank % 2 == 0 else {"b": b, "a": a}
        return _ctx().all_reduce("SUM", value)

    out = strategy.experimental_local_results(strategy.run(fn))[0]
    ok = sorted(out) == ["a", "b"]
    ok = ok and np.array_equal(out["a"], _serial_sum(n, lambda r: np.full(2, r, np.float32)))
    ok = ok and np.array_equal(out["b"], _serial_sum(n, lambda r: np.full(3, 10.0 * r)))
    assert all_ranks_ok(test_comm, ok), f"rank {rank}: {out}"


def test_a_list_against_a_tuple(strategy: Any, test_comm: Any) -> None:
    odd = odd_rank()

    def fn() -> Any:
        x = np.ones(2, np.float32)
        return _ctx().all_reduce("SUM", (x, x) if odd else [x, x])

    _raises_naming(strategy, test_comm, lambda: strategy.run(fn), ["[., .]", "(., .)"])


def test_a_nested_sequence_of_another_length(strategy: Any, test_comm: Any) -> None:
    # Three arrays on every rank, grouped differently: [x, [x, x]] and [[x, x], x].
    odd = odd_rank()

    def fn() -> Any:
        x = np.ones(2, np.float32)
        return _ctx().all_reduce("SUM", [[x, x], x] if odd else [x, [x, x]])

    texts = ["[., [., .]]", "[[., .], .]", "structure"]
    _raises_naming(strategy, test_comm, lambda: strategy.run(fn), texts)


def test_namedtuples_of_another_type_with_the_same_fields(strategy: Any, test_comm: Any) -> None:
    odd = odd_rank()

    def fn(kind: Any) -> Any:
        x = np.ones(2, np.float32)
        return _ctx().all_reduce("SUM", kind(x, x))

    n = strategy.num_replicas_in_sync
    same = strategy.experimental_local_results(strategy.run(fn, args=(P,)))[0]
    assert type(same) is P and np.array_equal(same.b, np.full(2, n, np.float32))
    texts = ["P(a=., b=.)", "Q(a=., b=.)"]
    _raises_naming(strategy, test_comm, lambda: strategy.run(fn, args=(Q if odd else P,)), texts)


def test_a_none_leaf_on_one_rank(strategy: Any, test_comm: Any) -> None:
    # TF raises ValueError for a None leaf ("Attempt to convert a value (None) ..."); the rank
    # holding it raises that, the others are told instead of waiting in their all-reduce.
    odd = odd_rank()

    def fn() -> Any:
        x = np.ones(2, np.float32)
        return _ctx().all_reduce("SUM", {"a": x, "b": None if odd else x})

    texts = ["{'a': ., 'b': None}", "{'a': ., 'b': .}"]
    if odd:
        _raises_naming(strategy, test_comm, lambda: strategy.run(fn), texts, own=ValueError)
    else:
        _raises_naming(strategy, test_comm, lambda: strategy.run(fn), texts)


def test_a_leaf_that_does_not_convert_on_one_rank(strategy: Any, test_comm: Any) -> None:
    # 2**70 does not convert (TF's ValueError; it was an OverflowError, which once escaped
    # before the agreement, leaving the other ranks in their all-reduce). The other ranks pass
    # an array: TF refuses any Python number in all_reduce (test_reduce_python_values.py).
    odd = odd_rank()

    def fn() -> Any:
        return _ctx().all_reduce("SUM", [np.ones(2, np.int32), 2**70 if odd else np.int32(3)])

    own = ValueError if odd else None
    _raises_naming(strategy, test_comm, lambda: strategy.run(fn), [], own=own)


def test_dense_against_sparse(strategy: Any, test_comm: Any) -> None:
    odd = odd_rank()

    def fn() -> Any:
        x = np.ones((3, 2), np.float32)
        sparse = IndexedSlices(np.ones((1, 2), np.float32), np.array([1]), np.array([3, 2]))
        return _ctx().all_reduce("SUM", [x, sparse if odd else x])

    texts = ["[., IndexedSlices]", "[., .]"]
    _raises_naming(strategy, test_comm, lambda: strategy.run(fn), texts)


def test_all_gather_of_dicts_with_other_keys(strategy: Any, test_comm: Any) -> None:
    key = "c" if odd_rank() else "b"

    def fn() -> Any:
        x = np.full((1, 2), replica_id(), np.float32)
        return _ctx().all_gather({"a": x, key: x}, axis=0)

    texts = ["{'a': ., 'b': .}", "{'a': ., 'c': .}", "ReplicaContext.all_gather"]
    _raises_naming(strategy, test_comm, lambda: strategy.run(fn), texts)


def test_batch_reduce_to_with_dense_and_sparse_swapped(strategy: Any, test_comm: Any) -> None:
    odd = odd_rank()
    dense = np.ones(3, np.float32)
    sparse = IndexedSlices(np.ones((1, 3), np.float32), np.array([0]), np.array([3, 3]))
    pairs = [(sparse, sparse), (dense, dense)] if odd else [(dense, dense), (sparse, sparse)]
    texts = ["[IndexedSlices, .]", "[., IndexedSlices]", "StrategyExtended.batch_reduce_to"]
    call = lambda: strategy.extended.batch_reduce_to("SUM", pairs)  # noqa: E731
    _raises_naming(strategy, test_comm, call, texts)


def test_batch_reduce_to_of_a_generator_reads_it_once(strategy: Any, test_comm: Any) -> None:
    # The structure is taken from the pairs before they are reduced: a zip or generator must
    # still be reduced whole (TF takes any iterable of pairs).
    values = [strategy.run(lambda i=i: np.full(2, replica_id() + i, np.float32)) for i in range(3)]
    out = strategy.extended.batch_reduce_to("SUM", zip(values, values, strict=True))
    n = strategy.num_replicas_in_sync
    got = [np.asarray(strategy.experimental_local_results(o)[0]) for o in out]
    want = [_serial_sum(n, lambda r, i=i: np.full(2, r + i, np.float32)) for i in range(3)]
    ok = len(got) == 3 and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert all_ranks_ok(test_comm, ok), f"{got} != {want}"


@pytest.mark.parametrize("nest", ["dict", "tuple"])
@pytest.mark.parametrize("api", ["reduce", "gather", "reduce_to"])
def test_a_nest_against_one_value_in_cross_replica_apis(
    strategy: Any, test_comm: Any, api: str, nest: str
) -> None:
    # TF takes no dict here (ValueError "Attempt to convert a value ... to a Tensor"): the rank
    # passing one raises that, and the others are told, naming its structure. A tuple of
    # arrays converts to one stacked array in TF and here, so it is no nest for these APIs:
    # every rank is told that the shapes differ, naming both.
    # (At one rank TF's rules for a plain value on one worker apply instead: not this test.)
    if rank_size()[1] == 1:
        pytest.skip("a disagreement needs two ranks")
    odd = odd_rank()
    x = np.ones(2, np.float32)
    value: Any = ({"a": x} if nest == "dict" else (x,)) if odd else x
    calls = {
        "reduce": lambda: strategy.reduce("SUM", value, axis=None),
        "gather": lambda: strategy.gather(value, axis=0),
        "reduce_to": lambda: strategy.extended.reduce_to("SUM", value, x),
    }
    if nest == "dict":
        own = ValueError if odd else None
        _raises_naming(strategy, test_comm, calls[api], ["structure={'a': .}"], own)
    else:
        texts = ["(1, 2) float32", "(2,) float32"] if api != "gather" else ["(*, 2)", "(*,)"]
        _raises_naming(strategy, test_comm, calls[api], texts)


def test_reduce_of_sparse_against_dense(strategy: Any, test_comm: Any) -> None:
    if rank_size()[1] == 1:
        pytest.skip("a disagreement needs two ranks (plain values on one worker: TF's rules)")
    odd = odd_rank()
    sparse = IndexedSlices(np.ones((1, 3), np.float32), np.array([0]), np.array([3, 3]))
    value = sparse if odd else np.ones((1, 3), np.float32)
    texts = ["structure", "IndexedSlices", "(a single dense value)"]
    _raises_naming(strategy, test_comm, lambda: strategy.reduce("SUM", value, axis=None), texts)


def test_update_with_nested_args_moves_nothing_and_agrees_nothing(strategy: Any) -> None:
    # extended.update applies fn to each component with its replica's args (TF's
    # MirroredExtended._update): no collective, so nothing to agree, whatever the nest.
    with strategy.scope():
        v = mwms_mpi.Variable(np.zeros(2, np.float32), name="update_target")
    comm = strategy.extended._communicator
    before = comm.calls if comm is not None else 0
    args = ({"delta": np.ones(2, np.float32), "scale": [np.float32(2.0)]},)
    strategy.extended.update(v, lambda c, d: c.assign_add(d["delta"] * d["scale"][0]), args=args)
    assert (comm.calls if comm is not None else 0) == before
    np.testing.assert_array_equal(v.numpy(), np.full(2, 2.0, np.float32))


def test_a_list_and_an_array_of_the_same_values_agree(strategy: Any, test_comm: Any) -> None:
    """``strategy.reduce``, ``reduce_to`` and ``batch_reduce_to`` convert a list into one dense
    value (``tf.constant``'s rule), so a list on one rank and an array on another are the same
    call, not a structure mismatch."""
    if rank_size()[1] == 1:
        pytest.skip("plain values on one worker follow TF's rules (test_strategy_local.py)")
    odd = odd_rank()
    n = rank_size()[1]
    value = [1.0, 2.0] if odd else np.array([1.0, 2.0], np.float32)
    where = np.zeros(2, np.float32)  # the destinations: one host value, on every rank
    want = np.array([n, 2 * n], np.float32)
    got = [
        strategy.reduce("SUM", value, axis=None),
        strategy.extended.reduce_to("SUM", value, where),
        strategy.extended.batch_reduce_to("SUM", [(value, where)])[0],
    ]
    ok = all(
        np.array_equal(np.asarray(local), want)
        for g in got
        for local in strategy.experimental_local_results(g)
    )
    assert all_ranks_ok(test_comm, ok), f"rank {rank_size()[0]}: {got}"
