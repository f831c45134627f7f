"""TF's multi_worker_util rules (who is chief, how many workers, a task's id), errors included."""

from __future__ import annotations

from typing import Any

from mwms_mpi.cluster.spec import ClusterSpec

ALLOWED_TASK_TYPES = ("chief", "worker", "evaluator", "ps", None)


def normalize_cluster_spec(cluster_spec: Any) -> ClusterSpec:
    """Makes `cluster_spec` into a `ClusterSpec` object.

    Args:
      cluster_spec: a dict or ClusterSpec object specifying the cluster
        configurations.

    Returns:
      a `ClusterSpec` object.

    Raises:
      ValueError: if `cluster_spec` is not a dict or a `ClusterSpec`.
    """
    if isinstance(cluster_spec, dict):
        return ClusterSpec(cluster_spec)
    if not isinstance(cluster_spec, ClusterSpec):
        raise ValueError(
            "`cluster_spec' should be dict or a `tf.train.ClusterSpec` or a "
            "`tf.train.ClusterDef` object"
        )
    return cluster_spec


def task_count(cluster_spec: ClusterSpec, task_type: Any) -> int:
    """Returns the number of tasks of `task_type`, 0 if there is no such job."""
    try:
        return cluster_spec.num_tasks(task_type)
    except ValueError:
        return 0


def _validate_cluster_spec(cluster_spec: Any, task_type: Any, task_id: Any) -> None:
    """Validates `cluster_spec`.

    It checks:
    1) task type is one of "chief", "worker", "ps", "evaluator", or not provided
       (None).
    2) whether there is such a task type as `task_type` in the `cluster_spec`.
       The only exception is `evaluator`.
    3) whether there is at most one "chief" job.
    4) whether there is at most one "evaluator" job.
    5) whether the `task_id` is smaller than the number of tasks for that
       particular `task_type`.

    Args:
      cluster_spec: a dict or `ClusterSpec` object to be validated.
      task_type: string indicating the type of the task.
      task_id: the id of the `task_type` in this cluster.

    Raises:
      ValueError: if `cluster_spec` fails any check.
    """
    cluster_spec = normalize_cluster_spec(cluster_spec)
    if any(job not in ALLOWED_TASK_TYPES for job in cluster_spec.jobs):
        raise ValueError(
            f"Disallowed task type found in cluster spec. Allowed types are "
            f"{ALLOWED_TASK_TYPES} and the cluster spec is {cluster_spec}."
        )
    if task_type not in ALLOWED_TASK_TYPES:
        raise ValueError(
            f"Unrecognized task_type: {task_type}, valid task types are: {ALLOWED_TASK_TYPES}"
        )
    if task_type and task_type not in cluster_spec.jobs and task_type != "evaluator":
        raise ValueError(f"`task_type` {task_type!r} not found in cluster_spec.")
    if task_count(cluster_spec, "chief") > 1:
        raise ValueError("There must be at most one 'chief' job.")
    if task_count(cluster_spec, "evaluator") > 1:
        raise ValueError("There must be at most one 'evaluator' job.")
    # The `evaluator` job is allowed to be missing in `cluster_spec`.
    if task_type in cluster_spec.jobs and task_id >= task_count(cluster_spec, task_type):
        # TF formats the id with %d, which prints int(id): 1.5 -> 1, True -> 1.
        raise ValueError(f"The `task_id` {int(task_id)} exceeds the maximum id of {task_type}.")


def is_chief(cluster_spec: Any = None, task_type: Any = None, task_id: Any = None) -> bool:
    """Returns whether the given task is chief in the cluster.

    Since there is at most one evaluator and the evaluator itself should be
    independent of the training cluster, the evaluator job is also a chief job
    on its own. Without a "chief" job, worker 0 is the chief.

    Args:
      cluster_spec: a dict or `ClusterSpec` object specifying the cluster
        configurations.
      task_type: the task type in the cluster.
      task_id: the task id in the cluster.

    Returns:
      a boolean indicating whether the given task is chief.

    Raises:
      ValueError: if `task_type` is not in the `cluster_spec` or `task_id`
        exceeds the maximum id of the `task_type`.
    """
    _validate_cluster_spec(cluster_spec, task_type, task_id)
    cluster = normalize_cluster_spec(cluster_spec).as_dict()
    if task_type in ("chief", "evaluator"):
        return True
    return "chief" not in cluster and task_type == "worker" and task_id == 0


def collective_leader(cluster_spec: Any, task_type: Any, task_id: Any) -> str:
    """Return the job name for the leader of for collective ops.

    Args:
      cluster_spec: a dict or `ClusterSpec` object specifying the cluster
        configurations.
      task_type: the task type in the cluster.
      task_id: the task id in the cluster.

    Returns:
      a string indicating the leader job name or empty string if no need to set
      leader job.

    Raises:
      ValueError: if the cluster spec fails validation.
      AssertionError: if the cluster has neither a "chief" nor a "worker" job
        (TF raises it from an `assert`).
    """
    cluster_spec = normalize_cluster_spec(cluster_spec)
    if not cluster_spec.as_dict():
        return ""
    _validate_cluster_spec(cluster_spec, task_type, task_id)
    if task_type == "evaluator":
        return ""
    if "chief" in cluster_spec.jobs:
        return "/job:chief/replica:0/task:0"
    if "worker" not in cluster_spec.jobs:
        raise AssertionError(f"No 'chief' or 'worker' job in {cluster_spec}")
    return "/job:worker/replica:0/task:0"


def coordination_leader(cluster_spec: Any) -> str:
    """Return the task name of the coordination service leader.

    Args:
      cluster_spec: a dict or `ClusterSpec` object specifying the cluster
        configurations.

    Returns:
      a string indicating the task name of the coordination service leader.

    Raises:
      AssertionError: if the cluster has no "ps", "chief" or "worker" job (TF
        raises it from an `assert`).
    """
    cluster_spec = normalize_cluster_spec(cluster_spec)
    if not cluster_spec.as_dict():
        return ""
    if "ps" in cluster_spec.jobs:
        return "/job:ps/replica:0/task:0"
    if "chief" in cluster_spec.jobs:
        return "/job:chief/replica:0/task:0"
    if "worker" not in cluster_spec.jobs:
        raise AssertionError(f"No 'ps', 'chief' or 'worker' job in {cluster_spec}")
    return "/job:worker/replica:0/task:0"


def worker_count(cluster_spec: Any, task_type: Any) -> int:
    """Returns the number of workers in the cluster.

    The chief counts as a worker; an evaluator is in its own cluster.

    Raises:
      ValueError: if the cluster spec fails validation or `task_type` is not
        "chief", "worker" or "evaluator".
      KeyError: if `task_type` is "evaluator" and there is no evaluator job (as
        in TF).
    """
    _validate_cluster_spec(cluster_spec, task_type, task_id=0)
    cluster = normalize_cluster_spec(cluster_spec).as_dict()
    if task_type not in ["chief", "worker", "evaluator"]:
        raise ValueError(f"Unexpected `task_type` {task_type!r}")
    if task_type == "evaluator":
        return len(cluster["evaluator"])
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def id_in_cluster(cluster_spec: Any, task_type: Any, task_id: Any) -> int:
    """Returns a unique id for the task in the `task_type`'s cluster.

    It returns an id ranging from [0, `worker_count(task_type, task_id)`): the
    chief is 0 and workers follow it.

    Args:
      cluster_spec: a dict or `ClusterSpec` object to be validated.
      task_type: string indicating the type of the task.
      task_id: the id of the `task_type` in this cluster.

    Returns:
      an int indicating the unique id (for a worker or evaluator, of the type
      `task_id` has: TF adds to the id it is given without converting it).

    Raises:
      ValueError: if `task_type` is not "chief", "worker" or "evaluator".
    """
    _validate_cluster_spec(cluster_spec, task_type, task_id)
    cluster = normalize_cluster_spec(cluster_spec).as_dict()
    if task_type == "chief":
        return 0
    # The id as given, as TF: a float id gives a float (1.0 + 1 chief = 2.0), an evaluator's
    # id comes back unchanged (None included).
    if task_type == "worker":
        return task_id + len(cluster.get("chief", []))
    if task_type == "evaluator":
        return task_id
    raise ValueError(f"There is no id for task_type {task_type!r}")
