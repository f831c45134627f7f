"""The structure text every agreement digests: tf.nest's view of a value, stable across processes.

``values.structure.of`` (on ``nest.describe``) must give equal texts exactly when two values
flatten and pack alike: mapping keys sorted (insertion order and mapping type never matter,
as in TF), sequence lengths and types, namedtuples by qualified name and fields, ``None`` and
sparse leaves. Its digest (blake2 of the context, never ``hash()``) must be the same in every
process, and nothing in it may hold an object's address. One dense value costs nothing: ``""``.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from typing import Any, NamedTuple

import numpy as np
import pytest

from mwms_mpi import nest
from mwms_mpi.collective import call_context
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.collective.signature import digest
from mwms_mpi.values import IndexedSlices, Mirrored, PerReplica
from mwms_mpi.values.structure import of, of_pairs

X = np.ones(2, np.float32)
SPARSE = IndexedSlices(np.ones((1, 2)), np.array([0]), np.array([3, 2]))

P = collections.namedtuple("P", ["a", "b"])


class Typed(NamedTuple):
    a: Any
    b: Any


class Key:
    """A sortable key without a repr of its own: its default repr holds its address."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __lt__(self, other: Key) -> bool:
        return self.n < other.n


def test_one_dense_value_is_the_empty_text() -> None:
    for value in (X, np.float32(1.0), 1.0, 3, PerReplica((X, X)), Mirrored((X,))):
        assert of(value) == "", value


def test_leaves_of_other_kinds() -> None:
    assert of(None) == "None"
    assert of(SPARSE) == "IndexedSlices"
    assert of(PerReplica((SPARSE, SPARSE))) == "IndexedSlices"
    assert of([X, SPARSE, None]) == "[., IndexedSlices, None]"


def test_mapping_keys_sorted_whatever_the_insertion_order_or_type() -> None:
    a = of({"a": X, "b": X})
    assert a == "{'a': ., 'b': .}"
    assert of({"b": X, "a": X}) == a
    assert of(collections.OrderedDict([("b", X), ("a", X)])) == a
    assert of(collections.defaultdict(list, {"b": X, "a": X})) == a
    assert of({"a": X, "c": X}) != a


def test_sequence_lengths_and_types() -> None:
    assert of([X, X]) == "[., .]"
    assert of((X, X)) == "(., .)"
    assert of((X,)) == "(.,)"
    assert of([X]) != of([X, X])
    assert of([X, [X, X]]) == "[., [., .]]"
    assert of([[X, X], X]) == "[[., .], .]"


def test_namedtuples_by_qualified_name_and_fields() -> None:
    assert of(P(X, X)) == "P(a=., b=.)"
    assert of(Typed(X, None)) == "Typed(a=., b=None)"
    other = collections.namedtuple("P", ["a", "c"])  # type: ignore[name-match]
    assert of(other(X, X)) == "P(a=., c=.)"
    same = collections.namedtuple("P", ["a", "b"])  # type: ignore[name-match]
    assert of(same(X, X)) == of(P(X, X))  # TF: same name and fields, same type


def test_other_sequences_and_views() -> None:
    assert of(range(2)) == "range[., .]"
    assert of({"a": X}.values()) == "dict_values[.]"


def test_keys_never_show_an_address() -> None:
    text = of({Key(2): X, Key(1): None})
    assert "0x" not in text and text == "{<Key>: None, <Key>: .}"  # sorted: Key(1) first
    assert of({(1, "a"): X}) == "{(1, 'a', ): .}"


def test_unsortable_keys_do_not_raise() -> None:
    # flatten raises TypeError for these; the description must not (it runs before the
    # API's own agreement, where that error is refused on every rank).
    assert of({1: X, "a": X}) == "{1: ., 'a': .}"
    with pytest.raises(TypeError):
        nest.flatten({1: X, "a": X})


def test_pairs_describe_their_values_only() -> None:
    assert of_pairs([(X, X), (X, "/cpu:0")]) == "[., .]"
    assert of_pairs([(X, X), (SPARSE, X)]) == "[., IndexedSlices]"
    assert of_pairs([]) == "[]"
    assert of_pairs(X) == ""  # not pairs: the API raises; the text is the argument's own
    once = iter([(X, X)])
    of_pairs(once)
    assert next(once)[0] is X  # a one-shot iterable is never consumed


def test_nest_describe_follows_flatten_order() -> None:
    value = {"b": [X, (X, None)], "a": P(X, {"z": X, "y": X})}
    leaves: list[Any] = []

    def leaf(v: Any) -> str:
        leaves.append(v)
        return "."

    nest.describe(value, leaf)
    assert len(leaves) == len(nest.flatten(value))
    assert all(a is b for a, b in zip(leaves, nest.flatten(value), strict=True))


def test_the_context_digest_is_stable_across_processes() -> None:
    context = ("ReplicaContext.all_reduce", "SUM", "", "", of({"b": X, "a": P(X, None)}), "")
    code = (
        "import numpy as np, collections;"
        "from mwms_mpi.values.structure import of;"
        "from mwms_mpi.collective.signature import digest;"
        "P = collections.namedtuple('P', ['a', 'b']); X = np.ones(2, np.float32);"
        "print(digest(('ReplicaContext.all_reduce', 'SUM', '', '', "
        "of({'a': P(X, None), 'b': X}), '')))"
    )
    for seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        assert int(other.stdout) == digest(context)


def test_the_digest_separates_structures() -> None:
    base = ("ReplicaContext.all_reduce", "SUM", "", "", of({"a": X, "b": X}), "")
    for value in ({"a": X, "c": X}, [X, X], (X, X), {"a": X, "b": None}, {"a": X, "b": SPARSE}):
        assert digest((*base[:4], of(value), "")) != digest(base), value


def test_api_call_carries_the_structure_and_inner_calls_keep_it() -> None:
    with api_call(None, "ReplicaContext.all_reduce", "SUM", structure="{'a': .}"):
        assert call_context.current() == (
            "ReplicaContext.all_reduce",
            "SUM",
            "",
            "",
            "{'a': .}",
            "",
        )
        with api_call(None, "StrategyExtended.batch_reduce_to", "SUM", structure="[.]"):
            assert call_context.current()[4] == "{'a': .}"  # type: ignore[index]
            with api_call(None, "", kind="DS"):
                assert call_context.current() == (
                    "ReplicaContext.all_reduce",
                    "SUM",
                    "",
                    "DS",
                    "{'a': .}",
                    "",
                )
    assert call_context.current() is None


def test_user_site_is_the_first_frame_outside_the_package() -> None:
    call_context.want_sites(True)
    try:
        with api_call(None, "Strategy.reduce"):
            line = sys._getframe().f_lineno - 1
            site = call_context.current()[5]  # type: ignore[index]
        assert site == f"test_structure_digest.py:{line}"
        with call_context.merge_site("train.py:7"), api_call(None, "Strategy.reduce"):
            assert call_context.current()[5] == "train.py:7"  # type: ignore[index]
    finally:
        call_context.want_sites(False)
    with api_call(None, "Strategy.reduce"):
        assert call_context.current()[5] == ""  # type: ignore[index]
