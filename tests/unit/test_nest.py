"""tf.nest fidelity: each case's expected value is real TF 2.21's output, recorded literally."""

# ruff: noqa: E501  (the expected strings are TF's messages, verbatim)
# The table calls nest with wrong types on purpose, to record the errors TF raises:
# mypy: disable-error-code="arg-type, call-arg, func-returns-value, var-annotated"

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from mwms_mpi import nest

P = collections.namedtuple("P", ["b", "a"])


class L(list):
    pass


class T(tuple):
    pass


class D(dict):
    pass


CALLS: list[Any] = []

# Expected values: repr(result), or (exception type, str(exception)), recorded under TensorFlow
# 2.21.0 by evaluating each lambda's body with `nest = tf.nest` and the P, L, T, D, CALLS above
# (numpy 2.x reprs), i.e. for each (name, body) pair:
#   /tmp/tfvenv/bin/python -c 'import collections, numpy as np, tensorflow as tf; nest = tf.nest
#   ...definitions above...
#   try: print(repr(repr(eval(body))))
#   except Exception as e: print((type(e).__name__, str(e)))'
CASES: list[tuple[str, Callable[[], Any], Any]] = [
    (
        "flatten_dict_sorted",
        lambda: nest.flatten({"b": 1, "a": 2, "c": [3, (4, 5)]}),
        "[2, 1, 3, 4, 5]",
    ),
    ("flatten_none", lambda: nest.flatten(None), "[None]"),
    ("flatten_scalar", lambda: nest.flatten(3), "[3]"),
    ("flatten_str", lambda: nest.flatten("abc"), "['abc']"),
    ("flatten_bytes", lambda: nest.flatten(b"ab"), "[b'ab']"),
    ("flatten_ndarray", lambda: nest.flatten(np.arange(3)), "[array([0, 1, 2])]"),
    ("flatten_namedtuple_field_order", lambda: nest.flatten(P(b=1, a=2)), "[1, 2]"),
    (
        "flatten_ordereddict_sorted",
        lambda: nest.flatten(collections.OrderedDict([("b", 1), ("a", 2)])),
        "[2, 1]",
    ),
    (
        "flatten_defaultdict_sorted",
        lambda: nest.flatten(collections.defaultdict(list, {"b": 1, "a": 2})),
        "[2, 1]",
    ),
    ("flatten_empty_containers", lambda: nest.flatten([[], (), {}]), "[]"),
    ("flatten_set_is_leaf", lambda: nest.flatten({1, 2}), "[{1, 2}]"),
    ("flatten_int_keys", lambda: nest.flatten({2: "x", 1: "y", 10: "z"}), "['y', 'x', 'z']"),
    ("flatten_tuple_keys", lambda: nest.flatten({(1, 2): "x", (0, 5): "y"}), "['y', 'x']"),
    ("flatten_bool_keys", lambda: nest.flatten({True: 1, False: 2}), "[2, 1]"),
    (
        "flatten_mixed_keys",
        lambda: nest.flatten({2: "x", "a": "y"}),
        (TypeError, "'<' not supported between instances of 'str' and 'int'"),
    ),
    ("flatten_range", lambda: nest.flatten(range(3)), "[0, 1, 2]"),
    ("flatten_deque", lambda: nest.flatten(collections.deque([1, 2])), "[1, 2]"),
    ("flatten_keys_view", lambda: nest.flatten({"b": 1, "a": 2}.keys()), "['b', 'a']"),
    ("flatten_items_view", lambda: nest.flatten({"b": 1, "a": 2}.items()), "['b', 1, 'a', 2]"),
    (
        "flatten_deep",
        lambda: nest.flatten(({"z": 1, "y": [2, {"b": 3, "a": 4}]}, 5)),
        "[2, 4, 3, 1, 5]",
    ),
    ("flatten_dict_subclass", lambda: nest.flatten(D(b=1, a=2)), "[2, 1]"),
    (
        "flatten_expand_composites",
        lambda: nest.flatten([1, {"a": None}], expand_composites=True),
        "[1, None]",
    ),
    (
        "flatten_none_leaves",
        lambda: nest.flatten([None, (None, {"k": None})]),
        "[None, None, None]",
    ),
    (
        "is_nested_kinds",
        lambda: [
            nest.is_nested(x)
            for x in (
                [],
                (),
                {},
                1,
                None,
                "ab",
                b"ab",
                np.arange(2),
                {1},
                P(1, 2),
                range(0),
                collections.OrderedDict(),
            )
        ],
        "[True, True, True, False, False, False, False, False, False, True, True, True]",
    ),
    (
        "pack_ordereddict",
        lambda: nest.pack_sequence_as(collections.OrderedDict([("b", 0), ("a", 0)]), [1, 2]),
        "OrderedDict([('b', 2), ('a', 1)])",
    ),
    ("pack_dict", lambda: nest.pack_sequence_as({"b": 0, "a": 0}, [1, 2]), "{'b': 2, 'a': 1}"),
    (
        "pack_defaultdict",
        lambda: nest.pack_sequence_as(collections.defaultdict(list, {"b": 0, "a": 0}), [1, 2]),
        "defaultdict(<class 'list'>, {'b': 2, 'a': 1})",
    ),
    (
        "pack_namedtuple",
        lambda: nest.pack_sequence_as(P(b=0, a=(0, 0)), [1, 2, 3]),
        "P(b=1, a=(2, 3))",
    ),
    ("pack_scalar", lambda: nest.pack_sequence_as(0, [7]), "7"),
    ("pack_none_structure", lambda: nest.pack_sequence_as(None, [3]), "3"),
    ("pack_ndarray_structure", lambda: nest.pack_sequence_as(np.zeros(3), [7]), "7"),
    (
        "pack_scalar_two_items",
        lambda: nest.pack_sequence_as(0, [7, 8]),
        (
            ValueError,
            "The target structure is of type `<class 'int'>`\n  0\nHowever the input is a sequence (<class 'list'>) of length 2.\n  [7, 8]\nnest cannot guarantee that it is safe to map one to the other.",
        ),
    ),
    (
        "pack_scalar_long",
        lambda: nest.pack_sequence_as(0, list(range(100))),
        (
            ValueError,
            "The target structure is of type `<class 'int'>`\n  0\nHowever the input is a sequence (<class 'list'>) of length 100.\n  [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 2...\nnest cannot guarantee that it is safe to map one to the other.",
        ),
    ),
    (
        "pack_flat_not_sequence",
        lambda: nest.pack_sequence_as([0, 0], 5),
        (
            TypeError,
            "Attempted to pack value:\n  5\ninto a structure, but found incompatible type `<class 'int'>` instead.",
        ),
    ),
    (
        "pack_flat_none",
        lambda: nest.pack_sequence_as([0], None),
        (
            TypeError,
            "Attempted to pack value:\n  None\ninto a structure, but found incompatible type `<class 'NoneType'>` instead.",
        ),
    ),
    (
        "pack_flat_str",
        lambda: nest.pack_sequence_as([0], "a"),
        (
            TypeError,
            "Attempted to pack value:\n  a\ninto a structure, but found incompatible type `<class 'str'>` instead.",
        ),
    ),
    (
        "pack_flat_ndarray",
        lambda: nest.pack_sequence_as([0, 0], np.array([1, 2])),
        (
            TypeError,
            "Attempted to pack value:\n  [1 2]\ninto a structure, but found incompatible type `<class 'numpy.ndarray'>` instead.",
        ),
    ),
    ("pack_flat_tuple", lambda: nest.pack_sequence_as([0, 0], (1, 2)), "[1, 2]"),
    ("pack_flat_nested_items", lambda: nest.pack_sequence_as([0, 0], [[1], 2]), "[[1], 2]"),
    (
        "pack_too_few",
        lambda: nest.pack_sequence_as([0, 0, 0], [1, 2]),
        (
            ValueError,
            "Could not pack sequence. Structure had 3 atoms, but flat_sequence had 2 items.  Structure: [0, 0, 0], flat_sequence: [1, 2].",
        ),
    ),
    (
        "pack_too_many",
        lambda: nest.pack_sequence_as([0, 0], [1, 2, 3]),
        (
            ValueError,
            "Could not pack sequence. Structure had 2 atoms, but flat_sequence had 3 items.  Structure: [0, 0], flat_sequence: [1, 2, 3].",
        ),
    ),
    ("pack_empty", lambda: nest.pack_sequence_as([[], ()], []), "[[], ()]"),
    (
        "pack_mixed_keys",
        lambda: nest.pack_sequence_as({2: 0, "a": 0}, [1, 2]),
        (TypeError, "nest only supports dicts with sortable keys."),
    ),
    ("pack_keys_view", lambda: nest.pack_sequence_as({"b": 1, "a": 2}.keys(), [5, 6]), "[5, 6]"),
    ("pack_range", lambda: nest.pack_sequence_as(range(2), [5, 6]), "[5, 6]"),
    (
        "pack_deque",
        lambda: nest.pack_sequence_as(collections.deque([0, 0]), [5, 6]),
        "deque([5, 6])",
    ),
    ("pack_tuple_subclass", lambda: nest.pack_sequence_as(T((1,)), [5]), "(5,)"),
    ("pack_dict_subclass", lambda: nest.pack_sequence_as(D(b=0, a=0), [5, 6]), "{'b': 6, 'a': 5}"),
    (
        "pack_types",
        lambda: [
            type(nest.pack_sequence_as(s, [1])).__name__
            for s in (
                [0],
                (0,),
                {"a": 0},
                collections.OrderedDict(a=0),
                collections.defaultdict(int, a=0),
                D(a=0),
                L([0]),
                T((0,)),
                P(0, ()),
            )
        ],
        "['list', 'tuple', 'dict', 'OrderedDict', 'defaultdict', 'D', 'L', 'T', 'P']",
    ),
    (
        "map_two_dicts",
        lambda: nest.map_structure(
            lambda x, y: x + y, {"b": 1, "a": [2, 3]}, {"a": [20, 30], "b": 10}
        ),
        "{'b': 11, 'a': [22, 33]}",
    ),
    (
        "map_none_leaves",
        lambda: nest.map_structure(lambda x: x, [None, (None,)]),
        "[None, (None,)]",
    ),
    (
        "map_returns_none",
        lambda: nest.map_structure(lambda x: None, {"a": (1, 2)}),
        "{'a': (None, None)}",
    ),
    (
        "map_ndarray_leaves",
        lambda: nest.map_structure(lambda x: x * 2, [np.arange(2), {"k": np.float32(1)}]),
        "[array([0, 2]), {'k': np.float32(2.0)}]",
    ),
    (
        "map_defaultdict",
        lambda: nest.map_structure(lambda x: x, collections.defaultdict(list, {"b": 1})),
        "defaultdict(<class 'list'>, {'b': 1})",
    ),
    (
        "map_call_order",
        lambda: (
            nest.map_structure(
                lambda x: CALLS.append(x) or len(CALLS), {"b": [1, 2], "a": (3, {"z": 4, "y": 5})}
            )
            and CALLS
        ),
        "[3, 5, 4, 1, 2]",
    ),
    (
        "map_no_structure",
        lambda: nest.map_structure(lambda: 1),
        (ValueError, "Must provide at least one structure"),
    ),
    (
        "map_not_callable",
        lambda: nest.map_structure(1, [1]),
        (TypeError, "func must be callable, got: 1"),
    ),
    (
        "map_bad_kwarg",
        lambda: nest.map_structure(lambda x: x, [1], foo=1),
        (
            ValueError,
            "Only valid keyword arguments are `check_types` and `expand_composites`, not: `foo`",
        ),
    ),
    (
        "map_expand_composites_kwarg",
        lambda: nest.map_structure(lambda x: x, [1], expand_composites=False),
        "[1]",
    ),
    (
        "map_list_vs_tuple",
        lambda: nest.map_structure(lambda x, y: x, [1], (1,)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[1]\n\nSecond structure: type=tuple str=(1,)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=list str=[1] has type list, while second structure type=tuple str=(1,) has type tuple\nEntire first structure:\n[.]\nEntire second structure:\n(.,)",
        ),
    ),
    (
        "map_list_vs_tuple_nocheck",
        lambda: nest.map_structure(lambda x, y: x, [1], (1,), check_types=False),
        "[1]",
    ),
    (
        "map_length",
        lambda: nest.map_structure(lambda x, y: x, [1, 2], [1]),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[1, 2]\n\nSecond structure: type=list str=[1]\n\nMore specifically: The two structures don't have the same number of elements. First structure: type=list str=[1, 2]. Second structure: type=list str=[1]\nEntire first structure:\n[., .]\nEntire second structure:\n[.]",
        ),
    ),
    (
        "map_seq_vs_leaf",
        lambda: nest.map_structure(lambda x, y: x, [1], 1),
        (
            ValueError,
            'The two structures don\'t have the same nested structure.\n\nFirst structure: type=list str=[1]\n\nSecond structure: type=int str=1\n\nMore specifically: Substructure "type=list str=[1]" is a sequence, while substructure "type=int str=1" is not\nEntire first structure:\n[.]\nEntire second structure:\n.',
        ),
    ),
    (
        "map_dict_keys",
        lambda: nest.map_structure(lambda x, y: x, {"a": 1}, {"b": 1}),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=dict str={'a': 1}\n\nSecond structure: type=dict str={'b': 1}\n\nMore specifically: The two dictionaries don't have the same set of keys. First structure has keys type=list str=['a'], while second structure has keys type=list str=['b']\nEntire first structure:\n{'a': .}\nEntire second structure:\n{'b': .}",
        ),
    ),
    (
        "map_dict_vs_ordereddict",
        lambda: nest.map_structure(lambda x, y: x, {"a": 1}, collections.OrderedDict(a=1)),
        "{'a': 1}",
    ),
    (
        "map_ordereddict_vs_dict",
        lambda: nest.map_structure(lambda x, y: x, collections.OrderedDict(a=1), {"a": 1}),
        "OrderedDict([('a', 1)])",
    ),
    (
        "map_namedtuple_vs_tuple",
        lambda: nest.map_structure(lambda x, y: x, P(1, 2), (1, 2)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=P str=P(b=1, a=2)\n\nSecond structure: type=tuple str=(1, 2)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=P str=P(b=1, a=2) has type P, while second structure type=tuple str=(1, 2) has type tuple\nEntire first structure:\nP(b=., a=.)\nEntire second structure:\n(., .)",
        ),
    ),
    (
        "map_namedtuple_vs_tuple_nocheck",
        lambda: nest.map_structure(lambda x, y: x, P(1, 2), (1, 2), check_types=False),
        "P(b=1, a=2)",
    ),
    (
        "map_tuple_vs_namedtuple_nocheck",
        lambda: nest.map_structure(lambda x, y: x, (1, 2), P(1, 2), check_types=False),
        "(1, 2)",
    ),
    (
        "map_namedtuple_vs_dict_nocheck",
        lambda: nest.map_structure(
            lambda x, y: (x, y), P(1, 2), {"a": 3, "b": 4}, check_types=False
        ),
        "P(b=(1, 3), a=(2, 4))",
    ),
    (
        "map_dict_keys_differ_nocheck",
        lambda: nest.map_structure(
            lambda x, y: (x, y), {"a": 1, "z": 2}, {"b": 3, "c": 4}, check_types=False
        ),
        "{'a': (1, 3), 'z': (2, 4)}",
    ),
    (
        "map_mixed_keys_one",
        lambda: nest.map_structure(lambda x: x, {2: 0, "a": 0}),
        (TypeError, "'<' not supported between instances of 'str' and 'int'"),
    ),
    (
        "map_mixed_keys_two",
        lambda: nest.map_structure(lambda x, y: x, {2: 0, "a": 0}, {2: 0, "a": 0}),
        (TypeError, "'<' not supported between instances of 'str' and 'int'"),
    ),
    (
        "map_list_subclass_vs_tuple",
        lambda: nest.map_structure(lambda x, y: x, L([1]), (1,)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=L str=[1]\n\nSecond structure: type=tuple str=(1,)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=L str=[1] has type L, while second structure type=tuple str=(1,) has type tuple\nEntire first structure:\n[.]\nEntire second structure:\n(.,)",
        ),
    ),
    ("assert_ok", lambda: nest.assert_same_structure([1, (2, 3)], [4, (5, 6)]), "None"),
    (
        "assert_list_vs_tuple",
        lambda: nest.assert_same_structure([1, (2, 3)], [4, [5, 6]]),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[1, (2, 3)]\n\nSecond structure: type=list str=[4, [5, 6]]\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=tuple str=(2, 3) has type tuple, while second structure type=list str=[5, 6] has type list\nEntire first structure:\n[., (., .)]\nEntire second structure:\n[., [., .]]",
        ),
    ),
    (
        "assert_list_vs_tuple_nocheck",
        lambda: nest.assert_same_structure([1, (2, 3)], [4, [5, 6]], check_types=False),
        "None",
    ),
    (
        "assert_check_types_int",
        lambda: nest.assert_same_structure([1], (1,), check_types=0),
        "None",
    ),
    (
        "assert_length",
        lambda: nest.assert_same_structure([1, 2], [1, 2, 3]),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[1, 2]\n\nSecond structure: type=list str=[1, 2, 3]\n\nMore specifically: The two structures don't have the same number of elements. First structure: type=list str=[1, 2]. Second structure: type=list str=[1, 2, 3]\nEntire first structure:\n[., .]\nEntire second structure:\n[., ., .]",
        ),
    ),
    (
        "assert_nested_length",
        lambda: nest.assert_same_structure([1, (2,)], [1, (2, 3)]),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[1, (2,)]\n\nSecond structure: type=list str=[1, (2, 3)]\n\nMore specifically: The two structures don't have the same number of elements. First structure: type=tuple str=(2,). Second structure: type=tuple str=(2, 3)\nEntire first structure:\n[., (.,)]\nEntire second structure:\n[., (., .)]",
        ),
    ),
    (
        "assert_inner_difference_first",
        lambda: nest.assert_same_structure([[1], 2, 3], [[1, 2], 2]),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[[1], 2, 3]\n\nSecond structure: type=list str=[[1, 2], 2]\n\nMore specifically: The two structures don't have the same number of elements. First structure: type=list str=[1]. Second structure: type=list str=[1, 2]\nEntire first structure:\n[[.], ., .]\nEntire second structure:\n[[., .], .]",
        ),
    ),
    (
        "assert_outer_length",
        lambda: nest.assert_same_structure([[1], 2, 3], [[1], 2]),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[[1], 2, 3]\n\nSecond structure: type=list str=[[1], 2]\n\nMore specifically: The two structures don't have the same number of elements. First structure: type=list str=[[1], 2, 3]. Second structure: type=list str=[[1], 2]\nEntire first structure:\n[[.], ., .]\nEntire second structure:\n[[.], .]",
        ),
    ),
    (
        "assert_leaf_vs_seq",
        lambda: nest.assert_same_structure(1, [1]),
        (
            ValueError,
            'The two structures don\'t have the same nested structure.\n\nFirst structure: type=int str=1\n\nSecond structure: type=list str=[1]\n\nMore specifically: Substructure "type=list str=[1]" is a sequence, while substructure "type=int str=1" is not\nEntire first structure:\n.\nEntire second structure:\n[.]',
        ),
    ),
    (
        "assert_seq_vs_leaf",
        lambda: nest.assert_same_structure([1], 1),
        (
            ValueError,
            'The two structures don\'t have the same nested structure.\n\nFirst structure: type=list str=[1]\n\nSecond structure: type=int str=1\n\nMore specifically: Substructure "type=list str=[1]" is a sequence, while substructure "type=int str=1" is not\nEntire first structure:\n[.]\nEntire second structure:\n.',
        ),
    ),
    (
        "assert_seq_vs_leaf_deep",
        lambda: nest.assert_same_structure([[1]], [1]),
        (
            ValueError,
            'The two structures don\'t have the same nested structure.\n\nFirst structure: type=list str=[[1]]\n\nSecond structure: type=list str=[1]\n\nMore specifically: Substructure "type=list str=[1]" is a sequence, while substructure "type=int str=1" is not\nEntire first structure:\n[[.]]\nEntire second structure:\n[.]',
        ),
    ),
    (
        "assert_none_vs_empty_list",
        lambda: nest.assert_same_structure(None, []),
        (
            ValueError,
            'The two structures don\'t have the same nested structure.\n\nFirst structure: type=NoneType str=None\n\nSecond structure: type=list str=[]\n\nMore specifically: Substructure "type=list str=[]" is a sequence, while substructure "type=NoneType str=None" is not\nEntire first structure:\n.\nEntire second structure:\n[]',
        ),
    ),
    (
        "assert_empty_list_vs_tuple",
        lambda: nest.assert_same_structure([], ()),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=list str=[]\n\nSecond structure: type=tuple str=()\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=list str=[] has type list, while second structure type=tuple str=() has type tuple\nEntire first structure:\n[]\nEntire second structure:\n()",
        ),
    ),
    (
        "assert_ndarray_vs_list",
        lambda: nest.assert_same_structure([np.zeros(2)], np.zeros(2)),
        (
            ValueError,
            'The two structures don\'t have the same nested structure.\n\nFirst structure: type=list str=[array([0., 0.])]\n\nSecond structure: type=ndarray str=[0. 0.]\n\nMore specifically: Substructure "type=list str=[array([0., 0.])]" is a sequence, while substructure "type=ndarray str=[0. 0.]" is not\nEntire first structure:\n[.]\nEntire second structure:\n.',
        ),
    ),
    (
        "assert_dict_keys",
        lambda: nest.assert_same_structure({"a": 1}, {"b": 1}),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=dict str={'a': 1}\n\nSecond structure: type=dict str={'b': 1}\n\nMore specifically: The two dictionaries don't have the same set of keys. First structure has keys type=list str=['a'], while second structure has keys type=list str=['b']\nEntire first structure:\n{'a': .}\nEntire second structure:\n{'b': .}",
        ),
    ),
    (
        "assert_dict_keys_nocheck",
        lambda: nest.assert_same_structure({"a": 1}, {"b": 1}, check_types=False),
        "None",
    ),
    (
        "assert_dict_key_count",
        lambda: nest.assert_same_structure({"b": 1, "a": 2}, {"a": 1}),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=dict str={'b': 1, 'a': 2}\n\nSecond structure: type=dict str={'a': 1}\n\nMore specifically: The two dictionaries don't have the same set of keys. First structure has keys type=list str=['b', 'a'], while second structure has keys type=list str=['a']\nEntire first structure:\n{'b': ., 'a': .}\nEntire second structure:\n{'a': .}",
        ),
    ),
    (
        "assert_ordereddict_keys",
        lambda: nest.assert_same_structure(
            collections.OrderedDict([("b", 1), ("a", 2)]), {"a": 1, "c": 2}
        ),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=OrderedDict str=OrderedDict([('b', 1), ('a', 2)])\n\nSecond structure: type=dict str={'a': 1, 'c': 2}\n\nMore specifically: The two dictionaries don't have the same set of keys. First structure has keys type=list str=['b', 'a'], while second structure has keys type=list str=['a', 'c']\nEntire first structure:\nOrderedDict([('b', .), ('a', .)])\nEntire second structure:\n{'a': ., 'c': .}",
        ),
    ),
    (
        "assert_dict_vs_list",
        lambda: nest.assert_same_structure({"a": 1}, [1]),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=dict str={'a': 1}\n\nSecond structure: type=list str=[1]\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=dict str={'a': 1} has type dict, while second structure type=list str=[1] has type list\nEntire first structure:\n{'a': .}\nEntire second structure:\n[.]",
        ),
    ),
    (
        "assert_dict_vs_list_nocheck",
        lambda: nest.assert_same_structure({"a": 1}, [1], check_types=False),
        "None",
    ),
    (
        "assert_dict_vs_ordereddict",
        lambda: nest.assert_same_structure({"a": 1}, collections.OrderedDict(a=1)),
        "None",
    ),
    (
        "assert_dict_vs_defaultdict",
        lambda: nest.assert_same_structure({"a": 1}, collections.defaultdict(int, a=1)),
        "None",
    ),
    (
        "assert_ordereddict_vs_list",
        lambda: nest.assert_same_structure(collections.OrderedDict(a=1), [1]),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=OrderedDict str=OrderedDict([('a', 1)])\n\nSecond structure: type=list str=[1]\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=OrderedDict str=OrderedDict([('a', 1)]) has type collections.OrderedDict, while second structure type=list str=[1] has type list\nEntire first structure:\nOrderedDict([('a', .)])\nEntire second structure:\n[.]",
        ),
    ),
    (
        "assert_defaultdict_vs_tuple",
        lambda: nest.assert_same_structure(collections.defaultdict(int, a=1), (1,)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=defaultdict str=defaultdict(<class 'int'>, {'a': 1})\n\nSecond structure: type=tuple str=(1,)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=defaultdict str=defaultdict(<class 'int'>, {'a': 1}) has type collections.defaultdict, while second structure type=tuple str=(1,) has type tuple\nEntire first structure:\ndefaultdict(<class 'int'>, {'a': .})\nEntire second structure:\n(.,)",
        ),
    ),
    (
        "assert_namedtuple_other_name",
        lambda: nest.assert_same_structure(P(1, 2), collections.namedtuple("Q", ["b", "a"])(1, 2)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=P str=P(b=1, a=2)\n\nSecond structure: type=Q str=Q(b=1, a=2)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=P str=P(b=1, a=2) has type P, while second structure type=Q str=Q(b=1, a=2) has type Q\nEntire first structure:\nP(b=., a=.)\nEntire second structure:\nQ(b=., a=.)",
        ),
    ),
    (
        "assert_namedtuple_same_name_and_fields",
        lambda: nest.assert_same_structure(P(1, 2), collections.namedtuple("P", ["b", "a"])(1, 2)),
        "None",
    ),
    (
        "assert_namedtuple_other_fields",
        lambda: nest.assert_same_structure(P(1, 2), collections.namedtuple("P", ["x", "y"])(1, 2)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=P str=P(b=1, a=2)\n\nSecond structure: type=P str=P(x=1, y=2)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=P str=P(b=1, a=2) has type P, while second structure type=P str=P(x=1, y=2) has type P\nEntire first structure:\nP(b=., a=.)\nEntire second structure:\nP(x=., y=.)",
        ),
    ),
    (
        "assert_namedtuple_other_name_nocheck",
        lambda: nest.assert_same_structure(
            P(1, 2), collections.namedtuple("Q", ["b", "a"])(1, 2), check_types=False
        ),
        "None",
    ),
    ("assert_list_subclass_vs_list", lambda: nest.assert_same_structure(L([1]), [1]), "None"),
    (
        "assert_tuple_subclass_vs_tuple",
        lambda: nest.assert_same_structure(T((1,)), (1,)),
        (
            TypeError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=T str=(1,)\n\nSecond structure: type=tuple str=(1,)\n\nMore specifically: The two namedtuples don't have the same sequence type. First structure type=T str=(1,) has type T, while second structure type=tuple str=(1,) has type tuple\nEntire first structure:\n(.,)\nEntire second structure:\n(.,)",
        ),
    ),
    ("assert_atoms_of_any_type", lambda: nest.assert_same_structure("abc", np.zeros(3)), "None"),
    (
        "assert_deep_dict",
        lambda: nest.assert_same_structure({"a": [1, 2]}, {"a": [1]}),
        (
            ValueError,
            "The two structures don't have the same nested structure.\n\nFirst structure: type=dict str={'a': [1, 2]}\n\nSecond structure: type=dict str={'a': [1]}\n\nMore specifically: The two structures don't have the same number of elements. First structure: type=list str=[1, 2]. Second structure: type=list str=[1]\nEntire first structure:\n{'a': [., .]}\nEntire second structure:\n{'a': [.]}",
        ),
    ),
    (
        "assert_mixed_keys",
        lambda: nest.assert_same_structure({2: 0, "a": 0}, {2: 0, "a": 0}),
        (TypeError, "'<' not supported between instances of 'str' and 'int'"),
    ),
]


@pytest.mark.parametrize(("name", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_matches_tf(name: str, call: Callable[[], Any], expected: Any) -> None:
    CALLS.clear()
    if isinstance(expected, tuple):
        exc_type, message = expected
        with pytest.raises(exc_type) as info:
            call()
        assert type(info.value) is exc_type
        assert str(info.value) == message
    else:
        assert repr(call()) == expected


def test_pack_keeps_mapping_types() -> None:
    packed = nest.pack_sequence_as(collections.defaultdict(list, {"b": 0, "a": 0}), [1, 2])
    assert type(packed) is collections.defaultdict
    assert packed.default_factory is list
    assert list(packed.items()) == [("b", 2), ("a", 1)]
    od = nest.pack_sequence_as(collections.OrderedDict([("b", 0), ("a", 0)]), [1, 2])
    assert type(od) is collections.OrderedDict
    assert list(od.items()) == [("b", 2), ("a", 1)]
    assert type(nest.pack_sequence_as(D(a=0), [1])) is D


def test_order_does_not_depend_on_insertion_order() -> None:
    # Keys inserted in opposite orders (as different processes may build them) flatten alike.
    keys = [f"grad/{i}" for i in range(50)]
    one = {k: i for i, k in enumerate(keys)}
    two = {k: one[k] for k in reversed(keys)}
    assert nest.flatten(one) == nest.flatten(two) == [one[k] for k in sorted(keys)]


def test_round_trip() -> None:
    structure = {"w": [np.ones(2), (np.zeros(1), None)], "b": P(b=np.int32(3), a={"x": 1.0})}
    flat = nest.flatten(structure)
    assert len(flat) == 5
    back = nest.pack_sequence_as(structure, flat)
    nest.assert_same_structure(structure, back)
    assert all(a is b for a, b in zip(nest.flatten(back), flat, strict=True))


def test_map_structure_leaves_are_not_copied() -> None:
    array = np.arange(3)
    (out,) = nest.map_structure(lambda x: x, [array])
    assert out is array


def test_pack_returns_flat_items_themselves() -> None:
    items = [np.arange(2), np.arange(3)]
    packed = nest.pack_sequence_as((0, [0]), items)
    assert packed[0] is items[0] and packed[1][0] is items[1]


def test_unsortable_keys_in_pack_are_reworded() -> None:
    with pytest.raises(TypeError, match=r"^nest only supports dicts with sortable keys\.$"):
        nest.pack_sequence_as({1: 0, "a": 0}, [1, 2])


def test_mapping_without_mutation_is_rebuilt_from_pairs() -> None:
    import types

    proxy = types.MappingProxyType({"b": 0, "a": 0})
    assert nest.flatten(types.MappingProxyType({"b": 1, "a": 2})) == [2, 1]
    with pytest.raises(TypeError, match="Error creating an object of type"):
        nest.pack_sequence_as(proxy, [1, 2])


def test_is_nested_is_cached_per_type_and_thread_safe() -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(200):
                Q = collections.namedtuple("Q", ["x"])
                assert nest.flatten(Q(x=[1, {"k": 2}])) == [1, 2]
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
