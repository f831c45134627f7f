"""tf.nest rules an audit found missing: each expected value is real TF 2.21's output, literally.

Composite expansion (``IndexedSlices`` with ``expand_composites=True``), attrs classes, TF's
``__tf_flatten__`` protocol, the "same set of keys" check for every Mapping, and the type of
``replica_id_in_sync_group`` inside the default strategy's ``run``.
"""

# ruff: noqa: E501  (the expected strings are TF's messages, verbatim)

from __future__ import annotations

import collections.abc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import nest
from mwms_mpi.values import IndexedSlices


def _isl(dense_shape: Any = (2, 1)) -> IndexedSlices:
    ds_array = None if dense_shape is None else np.array(dense_shape, np.int32)
    return IndexedSlices(np.array([[1.0]], np.float32), np.array([0], np.int32), ds_array)


def _as_lists(values: list[Any]) -> list[Any]:
    return [(np.asarray(v).dtype.name, np.asarray(v).tolist()) for v in values]


# --- 1. expand_composites: an IndexedSlices is [values, indices, dense_shape] -------------


def test_flatten_expands_indexed_slices_in_tf_order() -> None:
    # TF: [1, T<float32[1, 1]>[[1.0]], T<int32[1]>[0], T<int32[2]>[2, 1]]
    flat = nest.flatten({"g": _isl(), "a": 1}, expand_composites=True)
    assert flat[0] == 1
    assert _as_lists(flat[1:]) == [("float32", [[1.0]]), ("int32", [0]), ("int32", [2, 1])]


def test_flatten_without_dense_shape_has_two_components() -> None:
    assert _as_lists(nest.flatten(_isl(None), expand_composites=True)) == [
        ("float32", [[1.0]]),
        ("int32", [0]),
    ]


def test_flatten_default_keeps_indexed_slices_an_atom() -> None:
    isl = _isl()
    assert nest.flatten([isl]) == [isl]
    assert not nest.is_nested(isl)


def test_map_structure_rebuilds_indexed_slices() -> None:
    # TF: IS(values=[[2.0]], indices=[0], dense_shape=[4, 2])
    out = nest.map_structure(lambda t: t * 2, _isl(), expand_composites=True)
    assert type(out) is IndexedSlices
    assert _as_lists([out.values, out.indices, out.dense_shape]) == [
        ("float32", [[2.0]]),
        ("int32", [0]),
        ("int32", [4, 2]),
    ]


def test_pack_sequence_as_rebuilds_indexed_slices() -> None:
    # TF: IS(values=[[5.0]], indices=[1], dense_shape=[3, 1]); without a dense_shape it stays None
    flat = [np.array([[5.0]], np.float32), np.array([1], np.int32), np.array([3, 1], np.int32)]
    out = nest.pack_sequence_as(_isl(), flat, expand_composites=True)
    assert _as_lists([out.values, out.indices, out.dense_shape]) == _as_lists(flat)
    packed = nest.pack_sequence_as(
        {"a": _isl(None), "b": 1}, [flat[0], flat[1], 7], expand_composites=True
    )
    assert packed["b"] == 7 and packed["a"].dense_shape is None
    assert _as_lists([packed["a"].values, packed["a"].indices]) == _as_lists(flat[:2])


def test_pack_sequence_as_counts_components() -> None:
    with pytest.raises(
        ValueError,
        match=r"^Could not pack sequence. Structure had 3 atoms, but flat_sequence had 2 items.  Structure: \{'a': ",
    ):
        nest.pack_sequence_as({"a": _isl(None), "b": 1}, [1, 2], expand_composites=True)


def test_assert_same_structure_expanded_indexed_slices_is_a_sequence() -> None:
    isl = _isl()
    with pytest.raises(ValueError) as info:
        nest.assert_same_structure(isl, 1, expand_composites=True)
    assert str(info.value) == (
        "The two structures don't have the same nested structure.\n\n"
        f"First structure: type=IndexedSlices str={isl}\n\nSecond structure: type=int str=1\n\n"
        f'More specifically: Substructure "type=IndexedSlices str={isl}" is a sequence, while substructure "type=int str=1" is not\n'
        "Entire first structure:\n.\nEntire second structure:\n."
    )
    with pytest.raises(
        TypeError,
        match=r"has type IndexedSlices, while second structure type=list str=\[1, 2, 3\] has type list\nEntire first structure:\n.\nEntire second structure:\n\[., ., .\]$",
    ):
        nest.assert_same_structure(isl, [1, 2, 3], expand_composites=True)
    nest.assert_same_structure(isl, _isl((5, 2)), expand_composites=True)  # shapes may differ
    nest.assert_same_structure(isl, 1)  # not expanded: two atoms


def test_assert_same_structure_incompatible_type_specs() -> None:
    # TF checks the specs with check_types=False too.
    isl, isl2 = _isl(), _isl(None)
    for check_types in (True, False):
        with pytest.raises(ValueError) as info:
            nest.assert_same_structure(isl, isl2, check_types=check_types, expand_composites=True)
        assert str(info.value).endswith(
            "More specifically: Incompatible CompositeTensor TypeSpecs: type=IndexedSlicesSpec str=IndexedSlicesSpec(TensorShape([2, 1]), tf.float32, tf.int32, tf.int32, TensorShape([1])) vs. type=IndexedSlicesSpec str=IndexedSlicesSpec(TensorShape([None, 1]), tf.float32, tf.int32, None, TensorShape([1]))\n"
            "Entire first structure:\n.\nEntire second structure:\n."
        )
    isl64 = IndexedSlices(np.array([[1.0]]), np.array([0], np.int32), np.array([2, 1], np.int32))
    with pytest.raises(
        ValueError,
        match=r"tf\.float32, tf\.int32, tf\.int32, TensorShape\(\[1\]\)\) vs\. type=IndexedSlicesSpec str=IndexedSlicesSpec\(TensorShape\(\[2, 1\]\), tf\.float64, tf\.int32, tf\.int32, TensorShape\(\[1\]\)\)",
    ):
        nest.map_structure(lambda a, b: a, isl, isl64, expand_composites=True)


# --- 2. attrs classes and TF's __tf_flatten__ protocol are nested --------------------------


class _Attribute:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeAttrs:
    """What ``@attr.s`` generates (attrs is not a dependency): ``__attrs_attrs__``, in order."""

    __attrs_attrs__ = (_Attribute("y"), _Attribute("x"))

    def __init__(self, y: Any, x: Any) -> None:
        self.y, self.x = y, x

    def __repr__(self) -> str:
        return f"FakeAttrs(y={self.y!r}, x={self.x!r})"


class FakeAttrs2(FakeAttrs):
    def __repr__(self) -> str:
        return f"FakeAttrs2(y={self.y!r}, x={self.x!r})"


class Custom:
    """TF's CustomNestProtocol: ``__tf_flatten__`` gives (metadata, components)."""

    def __init__(self, a: Any, b: Any, meta: str = "m") -> None:
        self.a, self.b, self.meta = a, b, meta

    def __tf_flatten__(self) -> tuple[Any, tuple[Any, ...]]:
        return (self.meta,), (self.a, self.b)

    @classmethod
    def __tf_unflatten__(cls, metadata: Any, components: tuple[Any, ...]) -> Custom:
        assert type(components) is tuple
        return cls(*components, metadata[0])

    def __repr__(self) -> str:
        return f"Custom({self.a!r}, {self.b!r})"


class Custom2(Custom):
    pass


def test_attrs_flatten_in_definition_order() -> None:
    assert nest.flatten(FakeAttrs(1, 2)) == [1, 2]
    assert nest.flatten({"k": FakeAttrs([1, 2], 3)}) == [1, 2, 3]
    assert nest.is_nested(FakeAttrs(1, 2)) is True
    assert nest.is_nested(FakeAttrs) is False


def test_attrs_map_and_pack_rebuild_the_class() -> None:
    out = nest.map_structure(lambda v: v * 10, FakeAttrs(1, 2))
    assert type(out) is FakeAttrs and (out.y, out.x) == (10, 20)
    packed = nest.pack_sequence_as(FakeAttrs(1, 2), [5, 6])
    assert repr(packed) == "FakeAttrs(y=5, x=6)"


def test_attrs_structure_errors() -> None:
    with pytest.raises(TypeError) as info:
        nest.assert_same_structure(FakeAttrs(1, 2), FakeAttrs2(1, 2))
    assert str(info.value) == (
        "The two structures don't have the same nested structure.\n\nFirst structure: type=FakeAttrs str=FakeAttrs(y=1, x=2)\n\nSecond structure: type=FakeAttrs2 str=FakeAttrs2(y=1, x=2)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=FakeAttrs str=FakeAttrs(y=1, x=2) has type FakeAttrs, while second structure type=FakeAttrs2 str=FakeAttrs2(y=1, x=2) has type FakeAttrs2\nEntire first structure:\nFakeAttrs(y=., x=.)\nEntire second structure:\nFakeAttrs2(y=., x=.)"
    )
    nest.assert_same_structure(FakeAttrs(1, 2), (1, 2), check_types=False)
    with pytest.raises(ValueError) as info:
        nest.assert_same_structure([FakeAttrs(1, 2)], [FakeAttrs(1, (2, 3))])
    assert str(info.value) == (
        'The two structures don\'t have the same nested structure.\n\nFirst structure: type=list str=[FakeAttrs(y=1, x=2)]\n\nSecond structure: type=list str=[FakeAttrs(y=1, x=(2, 3))]\n\nMore specifically: Substructure "type=tuple str=(2, 3)" is a sequence, while substructure "type=int str=2" is not\nEntire first structure:\n[FakeAttrs(y=., x=.)]\nEntire second structure:\n[FakeAttrs(y=., x=(., .))]'
    )


def test_custom_protocol_flatten_map_pack() -> None:
    assert nest.flatten(Custom(1, [2, 3])) == [1, 2, 3]
    assert nest.is_nested(Custom(1, 2)) is True
    assert repr(nest.map_structure(lambda v: v * 10, Custom(1, 2))) == "Custom(10, 20)"
    assert (
        repr(nest.map_structure(lambda a, b: a + b, Custom(1, 2), Custom(10, 20)))
        == "Custom(11, 22)"
    )
    packed = nest.pack_sequence_as(Custom(1, [2, 3], "z"), [7, 8, 9])
    assert repr(packed) == "Custom(7, [8, 9])" and packed.meta == "z"
    assert nest.flatten(FakeAttrs(Custom(1, 2), {"b": 1, "a": 2})) == [1, 2, 2, 1]


def test_custom_protocol_structure_errors() -> None:
    nest.assert_same_structure(Custom(1, 2, "a"), Custom(1, 2, "b"))  # metadata is not compared
    nest.assert_same_structure(Custom(1, 2), (1, 2), check_types=False)
    with pytest.raises(
        TypeError,
        match=r"has type Custom, while second structure type=Custom2 str=Custom\(1, 2\) has type Custom2\nEntire first structure:\nCustom\(., .\)\nEntire second structure:\nCustom\(., .\)$",
    ):
        nest.assert_same_structure(Custom(1, 2), Custom2(1, 2))
    with pytest.raises(ValueError) as info:
        nest.assert_same_structure([Custom(1, 2)], [Custom(1, [2, 3])])
    assert str(info.value) == (
        'The two structures don\'t have the same nested structure.\n\nFirst structure: type=list str=[Custom(1, 2)]\n\nSecond structure: type=list str=[Custom(1, [2, 3])]\n\nMore specifically: Substructure "type=list str=[2, 3]" is a sequence, while substructure "type=int str=2" is not\nEntire first structure:\n[Custom(., .)]\nEntire second structure:\n[Custom(., [., .])]'
    )


# --- 3. every Mapping must have the same set of keys -----------------------------------------


class MyMapping(collections.abc.Mapping):  # type: ignore[type-arg]
    def __init__(self, d: dict[Any, Any]) -> None:
        self._d = dict(d)

    def __getitem__(self, k: Any) -> Any:
        return self._d[k]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"MyMapping({self._d})"


def test_mappings_with_different_keys_do_not_match() -> None:
    with pytest.raises(ValueError) as info:
        nest.map_structure(lambda x, y: (x, y), MyMapping({"a": 1}), MyMapping({"b": 2}))
    assert str(info.value) == (
        "The two structures don't have the same nested structure.\n\nFirst structure: type=MyMapping str=MyMapping({'a': 1})\n\nSecond structure: type=MyMapping str=MyMapping({'b': 2})\n\nMore specifically: The two dictionaries don't have the same set of keys. First structure has keys type=list str=['a'], while second structure has keys type=list str=['b']\nEntire first structure:\nMyMapping({'a': .})\nEntire second structure:\nMyMapping({'b': .})"
    )
    with pytest.raises(
        ValueError,
        match=r"First structure has keys type=list str=\['a'\], while second structure has keys type=list str=\['b'\]\n",
    ):
        nest.assert_same_structure(MyMapping({"a": 1}), {"b": 1})
    with pytest.raises(
        ValueError, match=r"while second structure has keys type=list str=\['a', 'b'\]\n"
    ):
        nest.assert_same_structure(MyMapping({"a": 1}), MyMapping({"a": 1, "b": 2}))
    nest.assert_same_structure(MyMapping({"a": 1}), {"a": 2})


# --- 4. replica_id_in_sync_group in the default strategy -------------------------------------


def test_default_strategy_run_replica_id_is_int32() -> None:
    # TF: T<int32[]>0 inside get_strategy().run (a plain ReplicaContext), int 0 outside; ours
    # is np.int32 as under MirroredStrategy.
    rid = ds.get_strategy().run(lambda: ds.get_replica_context().replica_id_in_sync_group)
    assert type(rid) is np.int32 and rid == 0
    half = ds.get_strategy().run(lambda: ds.get_replica_context().replica_id_in_sync_group / 2)
    assert np.asarray(half).dtype == np.float64
    top = ds.get_replica_context().replica_id_in_sync_group
    assert type(top) is int and top == 0
