"""multi_worker_util pinned to TF 2.21's tensorflow.python.distribute.multi_worker_util.

Expected values and messages come from running the same calls on real TF once
(/tmp/tfvenv/bin/python -c "from tensorflow.python.distribute import multi_worker_util as m; ...").
"""

from __future__ import annotations

import pytest

from mwms_mpi.cluster import multi_worker_util as mwu
from mwms_mpi.train import ClusterSpec

FULL = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p0:1"], "evaluator": ["e:1"]}
WORKERS = {"worker": ["w0:1", "w1:1", "w2:1"]}
ALLOWED = "('chief', 'worker', 'evaluator', 'ps', None)"


@pytest.mark.parametrize(
    ("cluster", "task_type", "task_id", "chief", "cid", "count", "leader"),
    [  # TF 2.21: is_chief, id_in_cluster, worker_count, collective_leader
        (FULL, "chief", 0, True, 0, 3, "/job:chief/replica:0/task:0"),
        (FULL, "worker", 0, False, 1, 3, "/job:chief/replica:0/task:0"),
        (FULL, "worker", 1, False, 2, 3, "/job:chief/replica:0/task:0"),
        (FULL, "evaluator", 0, True, 0, 1, ""),
        (WORKERS, "worker", 0, True, 0, 3, "/job:worker/replica:0/task:0"),
        (WORKERS, "worker", 2, False, 2, 3, "/job:worker/replica:0/task:0"),
    ],
)
def test_rules(
    cluster: dict, task_type: str, task_id: int, chief: bool, cid: int, count: int, leader: str
) -> None:
    for spec in (cluster, ClusterSpec(cluster)):
        assert mwu.is_chief(spec, task_type, task_id) is chief
        assert mwu.id_in_cluster(spec, task_type, task_id) == cid
        assert mwu.worker_count(spec, task_type) == count
        assert mwu.collective_leader(spec, task_type, task_id) == leader


def test_evaluator_outside_the_cluster() -> None:
    w = {"worker": ["a"]}
    assert mwu.is_chief(w, "evaluator", 3) is True
    assert mwu.id_in_cluster(w, "evaluator", 3) == 3
    assert mwu.collective_leader(w, "evaluator", 0) == ""
    with pytest.raises(KeyError, match="evaluator"):  # TF: KeyError 'evaluator'
        mwu.worker_count(w, "evaluator")


def test_ps_and_none() -> None:
    assert mwu.is_chief(FULL, "ps", 0) is False
    assert mwu.collective_leader(FULL, "ps", 0) == "/job:chief/replica:0/task:0"
    assert mwu.is_chief(WORKERS, None, None) is False
    assert mwu.is_chief(WORKERS, None, 0) is False
    with pytest.raises(ValueError, match=r"^There is no id for task_type 'ps'$"):
        mwu.id_in_cluster(FULL, "ps", 0)
    with pytest.raises(ValueError, match=r"^There is no id for task_type None$"):
        mwu.id_in_cluster(WORKERS, None, 0)
    with pytest.raises(ValueError, match=r"^Unexpected `task_type` 'ps'$"):
        mwu.worker_count(FULL, "ps")
    with pytest.raises(ValueError, match=r"^Unexpected `task_type` None$"):
        mwu.worker_count(WORKERS, None)


def test_leaders() -> None:
    assert mwu.coordination_leader(FULL) == "/job:ps/replica:0/task:0"
    assert mwu.coordination_leader(WORKERS) == "/job:worker/replica:0/task:0"
    assert mwu.coordination_leader({}) == ""
    assert mwu.collective_leader({}, None, None) == ""
    assert mwu.collective_leader({"evaluator": ["e"]}, "evaluator", 0) == ""
    # TF raises a bare AssertionError from an `assert` here (no message); ours says which
    # jobs are missing, so that an unrelated internal `assert` cannot pass for it.
    with pytest.raises(AssertionError, match=r"^No 'ps', 'chief' or 'worker' job in "):
        mwu.coordination_leader({"evaluator": ["e"]})
    with pytest.raises(AssertionError, match=r"^No 'chief' or 'worker' job in "):
        mwu.collective_leader({"ps": ["e"]}, "ps", 0)


def test_normalize() -> None:
    assert mwu.normalize_cluster_spec(WORKERS) == ClusterSpec(WORKERS)
    spec = ClusterSpec(WORKERS)
    assert mwu.normalize_cluster_spec(spec) is spec
    assert mwu.task_count(spec, "chief") == 0
    message = (
        "`cluster_spec' should be dict or a `tf.train.ClusterSpec` or a "
        "`tf.train.ClusterDef` object"
    )
    for bad in (["a"], None, 3):
        with pytest.raises(ValueError) as info:
            mwu.normalize_cluster_spec(bad)
        assert str(info.value) == message


@pytest.mark.parametrize(
    ("cluster", "task_type", "task_id", "message"),
    [
        (
            {"master": ["a"]},
            "worker",
            0,
            f"Disallowed task type found in cluster spec. Allowed types are {ALLOWED} and the "
            "cluster spec is ClusterSpec({'master': ['a']}).",
        ),
        (
            {"worker": ["a"], "foo": ["b"]},
            "worker",
            0,
            f"Disallowed task type found in cluster spec. Allowed types are {ALLOWED} and the "
            "cluster spec is ClusterSpec({'foo': ['b'], 'worker': ['a']}).",
        ),
        (WORKERS, "foo", 0, f"Unrecognized task_type: foo, valid task types are: {ALLOWED}"),
        (WORKERS, "chief", 0, "`task_type` 'chief' not found in cluster_spec."),
        ({"chief": ["a", "b"]}, "chief", 0, "There must be at most one 'chief' job."),
        (
            {"worker": ["a"], "evaluator": ["a", "b"]},
            "worker",
            0,
            "There must be at most one 'evaluator' job.",
        ),
        (WORKERS, "worker", 3, "The `task_id` 3 exceeds the maximum id of worker."),
        # Sparse jobs count tasks, not indices (TF too).
        (
            {"chief": ["c"], "worker": {2: "b"}},
            "worker",
            2,
            "The `task_id` 2 exceeds the maximum id of worker.",
        ),
        ({"worker": []}, "worker", 0, "The `task_id` 0 exceeds the maximum id of worker."),
    ],
)
def test_validation_errors(cluster: dict, task_type: str, task_id: int, message: str) -> None:
    with pytest.raises(ValueError) as info:
        mwu.is_chief(cluster, task_type, task_id)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        mwu._validate_cluster_spec(cluster, task_type, task_id)
    assert str(info.value) == message


def test_validation_type_errors_as_tf() -> None:
    with pytest.raises(TypeError, match="'>=' not supported between instances of 'str' and 'int'"):
        mwu.is_chief(WORKERS, "worker", "3")
    with pytest.raises(TypeError, match="'>=' not supported between instances of 'NoneType'"):
        mwu.is_chief(WORKERS, "worker", None)
    mwu._validate_cluster_spec(WORKERS, "worker", -1)  # TF accepts a negative id
    assert mwu.id_in_cluster({"chief": ["c"], "worker": {2: "b"}}, "worker", 0) == 1


def test_id_in_cluster_returns_the_id_as_given() -> None:
    # TF 2.21: `task_id + len(chief)` for a worker, `task_id` itself for an evaluator.
    chief_workers = {"chief": ["c"], "worker": ["a", "b"]}
    worker = mwu.id_in_cluster(chief_workers, "worker", 1.0)
    assert (type(worker), worker) == (float, 2.0)
    assert mwu.id_in_cluster({"worker": ["a"]}, "evaluator", None) is None
    evaluator = mwu.id_in_cluster({"worker": ["a"]}, "evaluator", 1.5)
    assert (type(evaluator), evaluator) == (float, 1.5)


@pytest.mark.parametrize(
    ("cluster", "task_type", "task_id", "message"),
    [  # TF formats the id with %d
        ({"chief": ["c"], "worker": ["a", "b"]}, "worker", 2.5, "The `task_id` 2 exceeds"),
        ({"chief": ["c"], "worker": ["a", "b"]}, "chief", True, "The `task_id` 1 exceeds"),
    ],
)
def test_task_id_message_formats_as_integer(
    cluster: dict, task_type: str, task_id: object, message: str
) -> None:
    with pytest.raises(ValueError) as info:
        mwu.is_chief(cluster, task_type, task_id)
    assert str(info.value) == f"{message} the maximum id of {task_type}."
