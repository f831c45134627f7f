"""ClusterSpec: tf.train.ClusterSpec's semantics without protobuf, so resolvers need no TF."""

from __future__ import annotations

from typing import Any, TypeAlias

JobTasks: TypeAlias = "list[Any] | dict[int, Any]"


# TF's message, %-formatted as TF formats it: a tuple job name's items are the arguments.
_TASKS_MESSAGE = "The tasks for job %r must be a list or a dictionary from integers to strings."

# A ClusterDef's task index is a protobuf int32 map key.
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _as_bytes(value: Any, message: str) -> bytes:
    """TF's `compat.as_bytes` with the TypeError TF raises in its place.

    `message % value` is TF's own %-formatting, so a tuple job name formats as
    its items (or fails as TF's does: "not all arguments converted ...").
    """
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, as TF
    if isinstance(value, bytes):
        return value
    raise TypeError(message % value)


def _check_proto_string(value: bytes) -> None:
    # Protobuf's string fields take UTF-8 only: TF fails with Python's UnicodeDecodeError.
    value.decode("utf-8")


def _check_cluster_def(cluster_spec: dict[Any, dict[int, Any]]) -> None:
    """The checks TF's `_make_cluster_def` makes while building its ClusterDef, in its order.

    Jobs in sorted order (mixed name types fail in `sorted`, as TF), each name
    bytes or unicode and UTF-8; then each task in index order: the address bytes
    or unicode, the index an int32 ("Value out of range: ..."), the address UTF-8.
    """
    for job_name, tasks in sorted(cluster_spec.items()):
        _check_proto_string(_as_bytes(job_name, "Job name %r must be bytes or unicode"))
        for i, task_address in sorted(tasks.items()):
            address = _as_bytes(task_address, "Task address %r must be bytes or unicode")
            if not _INT32_MIN <= i <= _INT32_MAX:
                raise ValueError(f"Value out of range: {i}")
            _check_proto_string(address)


def _decode(value: Any) -> Any:
    # A round trip through TF's ClusterDef turns bytes (and bytearray) into str.
    return bytes(value).decode("utf-8") if isinstance(value, (bytes, bytearray)) else value


class ClusterSpec:
    """Represents a cluster as a set of "tasks", organized into "jobs".

    A `ClusterSpec` represents the set of processes that participate in a
    distributed computation. Each job maps to a list of network addresses
    (typically "hostname:port"), or to a sparse mapping from task indices to
    addresses:

    ```python
    cluster = ClusterSpec({"worker": ["worker0.example.com:2222",
                                      "worker1.example.com:2222"],
                           "ps": {1: "ps1.example.com:2222"}})
    ```

    Unlike `tf.train.ClusterSpec`, there is no `tf.train.ClusterDef` protocol
    buffer: `as_cluster_def()` raises `NotImplementedError`. A copy made from
    another `ClusterSpec` behaves as TF's copy through a ClusterDef does: jobs
    sorted by name, tasks by index, bytes decoded to str.
    """

    def __init__(self, cluster: Any) -> None:
        """Creates a `ClusterSpec`.

        Args:
          cluster: A dictionary mapping one or more job names to (i) a list of
            network addresses, or (ii) a dictionary mapping integer task indices
            to network addresses; or another `ClusterSpec`.

        Raises:
          TypeError: If `cluster` is not a dictionary mapping strings to lists
            of strings, and not a `ClusterSpec`.
        """
        self._cluster_spec: dict[Any, dict[int, Any]] = {}
        if isinstance(cluster, dict):
            for job_name, tasks in cluster.items():
                if isinstance(tasks, (list, tuple)):
                    job_tasks = dict(enumerate(tasks))
                elif isinstance(tasks, dict):
                    job_tasks = {int(i): task for i, task in tasks.items()}
                else:
                    raise TypeError(_TASKS_MESSAGE % job_name)
                self._cluster_spec[job_name] = job_tasks
            _check_cluster_def(self._cluster_spec)
        elif isinstance(cluster, ClusterSpec):
            for job_name in sorted(cluster.jobs, key=_decode):
                job = cluster._cluster_spec[job_name]
                self._cluster_spec[_decode(job_name)] = {i: _decode(job[i]) for i in sorted(job)}
        else:
            raise TypeError(
                "`cluster` must be a dictionary mapping one or more job names to lists "
                "of network addresses, or a `ClusterDef` protocol buffer"
            )

    def __bool__(self) -> bool:
        return bool(self._cluster_spec)

    def __eq__(self, other: object) -> bool:
        # As TF: the inner dict of dicts compared with `other` (a ClusterSpec via reflection).
        return self._cluster_spec == other

    def __ne__(self, other: object) -> bool:
        return self._cluster_spec != other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        key_values = self.as_dict()
        string_items = [
            repr(k) + ": " + repr(key_values[k]) for k in sorted(key_values, key=_decode)
        ]
        return "ClusterSpec({" + ", ".join(string_items) + "})"

    def as_dict(self) -> dict[Any, JobTasks]:
        """Returns a dictionary from job names to their tasks.

        For each job, if the task index space is dense, the corresponding value
        will be a list of network addresses; otherwise it will be a dictionary
        mapping (sparse) task indices to the corresponding addresses.

        Returns:
          A dictionary mapping job names to lists or dictionaries describing the
          tasks in those jobs.
        """
        ret: dict[Any, JobTasks] = {}
        for job in self.jobs:
            task_indices = self.task_indices(job)
            if len(task_indices) == 0:
                ret[job] = {}
                continue
            if max(task_indices) + 1 == len(task_indices):
                ret[job] = self.job_tasks(job)
            else:
                ret[job] = {i: self.task_address(job, i) for i in task_indices}
        return ret

    def as_cluster_def(self) -> Any:
        """Not available: mwms_mpi has no `tf.train.ClusterDef` protocol buffer.

        Raises:
          NotImplementedError: Always.
        """
        raise NotImplementedError(
            "ClusterSpec.as_cluster_def() needs TensorFlow's ClusterDef protocol buffer, "
            "which mwms_mpi does not provide; use as_dict() instead."
        )

    @property
    def jobs(self) -> list[Any]:
        """Returns a list of job names in this cluster.

        Returns:
          A list of strings, corresponding to the names of jobs in this cluster.
        """
        return list(self._cluster_spec.keys())

    def _job(self, job_name: Any) -> dict[int, Any]:
        try:
            return self._cluster_spec[job_name]
        except KeyError:
            raise ValueError(f"No such job in cluster: {job_name!r}") from None

    def num_tasks(self, job_name: Any) -> int:
        """Returns the number of tasks defined in the given job.

        Args:
          job_name: The string name of a job in this cluster.

        Returns:
          The number of tasks defined in the given job.

        Raises:
          ValueError: If `job_name` does not name a job in this cluster.
        """
        return len(self._job(job_name))

    def task_indices(self, job_name: Any) -> list[int]:
        """Returns a list of valid task indices in the given job.

        Args:
          job_name: The string name of a job in this cluster.

        Returns:
          A list of valid task indices in the given job.

        Raises:
          ValueError: If `job_name` does not name a job in this cluster.
        """
        return sorted(self._job(job_name).keys())

    def task_address(self, job_name: Any, task_index: Any) -> Any:
        """Returns the address of the given task in the given job.

        Args:
          job_name: The string name of a job in this cluster.
          task_index: A non-negative integer.

        Returns:
          The address of the given task in the given job.

        Raises:
          ValueError: If `job_name` does not name a job in this cluster,
            or no task with index `task_index` is defined in that job.
        """
        job = self._job(job_name)
        try:
            return job[task_index]
        except KeyError:
            raise ValueError(f"No task with index {task_index!r} in job {job_name!r}") from None

    def job_tasks(self, job_name: Any) -> list[Any]:
        """Returns a mapping from task ID to address in the given job.

        NOTE: For backwards compatibility, this method returns a list. If the
        given job was defined with a sparse set of task indices, the length of
        this list may not reflect the number of tasks defined in this job. Use
        `num_tasks` to find the number of tasks defined in a particular job.

        Args:
          job_name: The string name of a job in this cluster.

        Returns:
          A list of task addresses, where the index in the list corresponds to
          the task index of each task. The list may contain `None` if the job
          was defined with a sparse set of task indices.

        Raises:
          ValueError: If `job_name` does not name a job in this cluster.
        """
        job = self._job(job_name)
        ret: list[Any] = [None for _ in range(max(job.keys()) + 1)]
        for i, task in job.items():
            ret[i] = task
        return ret
