"""ClusterSpec pinned to tf.train.ClusterSpec (TF 2.21).

Expected values come from running real TF once, e.g.
/tmp/tfvenv/bin/python -c "import tensorflow as tf; print(tf.train.ClusterSpec({...}).as_dict())"
"""

from __future__ import annotations

import pytest

from mwms_mpi.train import ClusterSpec

CLUSTER = {"worker": ["w0:1", "w1:1"], "chief": ["c:1"]}
SPARSE = {"worker": {1: "w1:1", 3: "w3:1"}, "ps": ["p0:1"]}


def test_dense_accessors() -> None:
    c = ClusterSpec(CLUSTER)
    assert c.jobs == ["worker", "chief"]  # insertion order, as TF
    assert c.as_dict() == {"worker": ["w0:1", "w1:1"], "chief": ["c:1"]}
    assert c.num_tasks("worker") == 2
    assert c.task_indices("worker") == [0, 1]
    assert c.task_address("chief", 0) == "c:1"
    assert c.job_tasks("worker") == ["w0:1", "w1:1"]
    assert repr(c) == "ClusterSpec({'chief': ['c:1'], 'worker': ['w0:1', 'w1:1']})"
    assert str(c) == repr(c)


def test_sparse_accessors() -> None:
    s = ClusterSpec(SPARSE)
    assert s.as_dict() == {"worker": {1: "w1:1", 3: "w3:1"}, "ps": ["p0:1"]}
    assert s.job_tasks("worker") == [None, "w1:1", None, "w3:1"]
    assert s.num_tasks("worker") == 2
    assert s.task_indices("worker") == [1, 3]
    assert repr(s) == "ClusterSpec({'ps': ['p0:1'], 'worker': {1: 'w1:1', 3: 'w3:1'}})"


def test_copy_sorts_jobs_like_tf_cluster_def() -> None:
    c = ClusterSpec(CLUSTER)
    copy = ClusterSpec(c)
    assert copy.jobs == ["chief", "worker"]  # TF: ['chief', 'worker'] (through ClusterDef)
    assert copy == c
    assert ClusterSpec(ClusterSpec(SPARSE)).as_dict() == {
        "ps": ["p0:1"],
        "worker": {1: "w1:1", 3: "w3:1"},
    }


def test_equality_and_bool() -> None:
    c = ClusterSpec(CLUSTER)
    # TF compares its inner dict of dicts: a dict of lists is not equal, a dict of dicts is.
    assert (c == {"worker": ["w0:1", "w1:1"], "chief": ["c:1"]}) is False
    assert c == {"worker": {0: "w0:1", 1: "w1:1"}, "chief": {0: "c:1"}}
    assert c != ClusterSpec({})
    assert (c == 3) is False
    assert ClusterSpec({}) == {}
    assert not ClusterSpec({})
    assert c
    with pytest.raises(TypeError, match="unhashable type: 'ClusterSpec'"):
        hash(c)


def test_conversions() -> None:
    assert ClusterSpec({"worker": {"1": "a", "0": "b"}}).as_dict() == {"worker": ["b", "a"]}
    assert ClusterSpec({"worker": ("a", "b")}).as_dict() == {"worker": ["a", "b"]}
    assert ClusterSpec({"worker": []}).as_dict() == {"worker": {}}
    assert ClusterSpec({"worker": []}).num_tasks("worker") == 0
    assert ClusterSpec({"w": [b"a:1"]}).as_dict() == {"w": [b"a:1"]}
    assert ClusterSpec(ClusterSpec({"w": [b"a:1"]})).as_dict() == {"w": ["a:1"]}
    assert ClusterSpec(ClusterSpec({b"w": ["a:1"]})).as_dict() == {"w": ["a:1"]}
    assert ClusterSpec({"w": {-1: "a"}}).as_dict() == {"w": {-1: "a"}}


def test_as_dict_returns_fresh_lists() -> None:
    c = ClusterSpec({"w": ["a"]})
    tasks = c.as_dict()["w"]
    assert isinstance(tasks, list)
    tasks.append("x")
    assert c.as_dict() == {"w": ["a"]}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.num_tasks("ps"), "No such job in cluster: 'ps'"),
        (lambda c: c.task_indices("ps"), "No such job in cluster: 'ps'"),
        (lambda c: c.task_address("ps", 0), "No such job in cluster: 'ps'"),
        (lambda c: c.task_address("worker", 5), "No task with index 5 in job 'worker'"),
        (lambda c: c.task_address("worker", "0"), "No task with index '0' in job 'worker'"),
        (lambda c: c.job_tasks("ps"), "No such job in cluster: 'ps'"),
    ],
)
def test_lookup_errors(call: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        call(ClusterSpec(CLUSTER))  # type: ignore[operator]
    assert str(info.value) == message


def test_empty_job_tasks_error() -> None:
    with pytest.raises(ValueError, match="empty"):  # TF: 'max() arg is an empty sequence'
        ClusterSpec({"worker": []}).job_tasks("worker")


@pytest.mark.parametrize(
    ("cluster", "error", "message"),
    [
        (
            {"worker": "a:1"},
            TypeError,
            "The tasks for job 'worker' must be a list or a dictionary from integers to strings.",
        ),
        (
            {"worker": {"a"}},
            TypeError,
            "The tasks for job 'worker' must be a list or a dictionary from integers to strings.",
        ),
        ({1: ["a"]}, TypeError, "Job name 1 must be bytes or unicode"),
        ({"w": [1]}, TypeError, "Task address 1 must be bytes or unicode"),
        ({"w": ["a", None]}, TypeError, "Task address None must be bytes or unicode"),
        ({"worker": {"x": "a"}}, ValueError, "invalid literal for int() with base 10: 'x'"),
        (
            ["a"],
            TypeError,
            "`cluster` must be a dictionary mapping one or more job names to lists of network "
            "addresses, or a `ClusterDef` protocol buffer",
        ),
        (
            None,
            TypeError,
            "`cluster` must be a dictionary mapping one or more job names to lists of network "
            "addresses, or a `ClusterDef` protocol buffer",
        ),
    ],
)
def test_construction_errors(cluster: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        ClusterSpec(cluster)
    assert str(info.value) == message


def test_as_cluster_def_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError, match="as_dict"):
        ClusterSpec(CLUSTER).as_cluster_def()


@pytest.mark.parametrize(
    ("cluster", "error", "message"),
    [  # TF 2.21 builds a ClusterDef protobuf in __init__; these are its failures, in its order.
        ({"w": {2**31: "a"}}, ValueError, "Value out of range: 2147483648"),
        ({"w": {-(2**31) - 1: "a"}}, ValueError, "Value out of range: -2147483649"),
        ({"w": {2**63: "a"}}, ValueError, "Value out of range: 9223372036854775808"),
        ({"w": {2**31: b"\xff"}}, ValueError, "Value out of range: 2147483648"),
        ({"w": {2**31: None}}, TypeError, "Task address None must be bytes or unicode"),
        (
            {"w": [b"\xff"]},
            UnicodeDecodeError,
            "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        ),
        (
            {b"\xff": ["a"]},
            UnicodeDecodeError,
            "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        ),
        (
            {"w": [bytearray(b"\xff")]},
            UnicodeDecodeError,
            "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        ),
        (
            {"\ud800": ["a"]},
            UnicodeEncodeError,
            "'utf-8' codec can't encode character '\\ud800' in position 0: surrogates not allowed",
        ),
        (
            {"w": {2**31: "\ud800"}},
            UnicodeEncodeError,
            "'utf-8' codec can't encode character '\\ud800' in position 0: surrogates not allowed",
        ),
        # Jobs are checked in sorted order: mixed name types fail in the sort itself.
        (
            {"a": ["x"], b"a": ["y"]},
            TypeError,
            "'<' not supported between instances of 'bytes' and 'str'",
        ),
        (
            {"worker": [None], 1: ["a"]},
            TypeError,
            "'<' not supported between instances of 'int' and 'str'",
        ),
        # TF formats the name with %r % name: a tuple's items are the arguments.
        ({(1,): ["a"]}, TypeError, "Job name 1 must be bytes or unicode"),
        ({(1, 2): ["a"]}, TypeError, "not all arguments converted during string formatting"),
        (
            {(1,): "a:1"},
            TypeError,
            "The tasks for job 1 must be a list or a dictionary from integers to strings.",
        ),
        ({(): "a:1"}, TypeError, "not enough arguments for format string"),
    ],
)
def test_cluster_def_checks(cluster: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        ClusterSpec(cluster)
    assert type(info.value) is error
    assert str(info.value) == message


def test_cluster_def_accepts_int32_bytearray_and_nul() -> None:
    edges = ClusterSpec({"w": {-(2**31): "a", 2**31 - 1: "b"}})
    assert edges.as_dict() == {"w": {-(2**31): "a", 2**31 - 1: "b"}}
    spec = ClusterSpec({"w": ("a", bytearray(b"x"))})  # TF: compat.as_bytes takes a bytearray
    tasks = spec.as_dict()["w"]
    assert tasks == ["a", bytearray(b"x")] and type(tasks[1]) is bytearray
    assert ClusterSpec(spec).as_dict() == {"w": ["a", "x"]}  # through the ClusterDef: str
    assert ClusterSpec({"w": ["a\x00b"]}).as_dict() == {"w": ["a\x00b"]}
    all_bytes = ClusterSpec({b"b": ["x"], b"a": [b"y"]})
    assert all_bytes.jobs == [b"b", b"a"]
    assert ClusterSpec(all_bytes).as_dict() == {"a": ["y"], "b": ["x"]}
