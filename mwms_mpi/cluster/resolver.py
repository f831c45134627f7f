"""ClusterResolver base, SimpleClusterResolver and UnionClusterResolver, with TF's semantics."""

from __future__ import annotations

import abc
import collections
from typing import Any

from mwms_mpi.cluster.spec import ClusterSpec


def format_master_url(master: str, rpc_layer: str | None = None) -> str:
    """Returns `rpc_layer://master`, or `master` when there is no `rpc_layer`."""
    if rpc_layer:
        return f"{rpc_layer}://{master}"
    return master


class ClusterResolver(abc.ABC):
    """Abstract class for all implementations of ClusterResolvers.

    A ClusterResolver tells a multi-worker strategy which cluster it runs in
    (`cluster_spec()`), which task this process is (`task_type`, `task_id`) and
    how many accelerators each worker has (`num_accelerators()`).

    Subclasses set `self._task_type`, `self._task_id` and `self._rpc_layer`, or
    override the properties. Unlike TF's base class, this one has no device
    runtime to query: `num_accelerators()` returns an empty `defaultdict(int)`
    unless a subclass knows better. It also has an `rpc_layer` property (TF's
    base class leaves that to subclasses).
    """

    @abc.abstractmethod
    def cluster_spec(self) -> ClusterSpec:
        """Retrieve the current state of the cluster and return a `ClusterSpec`.

        Returns:
          A `ClusterSpec` representing the state of the cluster at the moment
          this function is called.
        """
        raise NotImplementedError()

    @abc.abstractmethod
    def master(
        self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None
    ) -> str:
        """Retrieves the name or URL of the session master.

        Note: this is only useful for TensorFlow 1.x.

        Args:
          task_type: (Optional) The type of the TensorFlow task of the master.
          task_id: (Optional) The index of the TensorFlow task of the master.
          rpc_layer: (Optional) The RPC protocol for the given cluster.

        Returns:
          The name or URL of the session master.
        """
        raise NotImplementedError()

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None, config_proto: Any = None
    ) -> dict[str, int]:
        """Returns the number of accelerator cores per worker.

        As TF's, this first asks `self.master(task_type, task_id)` (so its
        errors, such as a task missing from the cluster, are raised here too)
        and returns a `collections.defaultdict(int)` (`["GPU"]` is 0, not a
        KeyError). TF then counts its local runtime's devices; mwms_mpi has no
        runtime to count, so the mapping stays empty.

        Args:
          task_type: (Optional) The type of the TensorFlow task of the machine
            we want to query.
          task_id: (Optional) The index of the TensorFlow task of the machine we
            want to query.
          config_proto: (Optional) Unused; kept for TF's signature.

        Returns:
          A map of accelerator types to number of cores.
        """
        del config_proto
        self.master(task_type, task_id)
        return collections.defaultdict(int)

    @property
    def environment(self) -> str | None:
        """Returns the current environment which TensorFlow is running in ("" here)."""
        return ""

    @property
    def task_type(self) -> str | None:
        """Returns the task type this `ClusterResolver` indicates, or `None`.

        Valid task types are 'chief', 'worker', 'ps' and 'evaluator'.
        """
        return getattr(self, "_task_type", None)

    @task_type.setter
    def task_type(self, task_type: str | None) -> None:
        self._task_type = task_type

    @property
    def task_id(self) -> int | None:
        """Returns the task id this `ClusterResolver` indicates, or `None`."""
        return getattr(self, "_task_id", None)

    @task_id.setter
    def task_id(self, task_id: int | None) -> None:
        self._task_id = task_id

    @property
    def rpc_layer(self) -> str | None:
        """Returns the RPC layer ("grpc", ...) of the cluster, or `None`."""
        return getattr(self, "_rpc_layer", None)

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer: str | None) -> None:
        self._rpc_layer = rpc_layer


class SimpleClusterResolver(ClusterResolver):
    """Simple implementation of ClusterResolver that accepts all attributes.

    Usage example with a multi-worker strategy:

    ```python
    cluster = ClusterSpec({"worker": ["worker0.example.com:2222",
                                      "worker1.example.com:2222"]})
    # On worker 0
    cluster_resolver = SimpleClusterResolver(cluster, task_type="worker",
                                             task_id=0,
                                             num_accelerators={"GPU": 8},
                                             rpc_layer="grpc")
    ```
    """

    def __init__(
        self,
        cluster_spec: ClusterSpec,
        master: str = "",
        task_type: str | None = None,
        task_id: int | None = None,
        environment: str = "",
        num_accelerators: dict[str, int] | None = None,
        rpc_layer: str | None = None,
    ) -> None:
        """Creates a SimpleClusterResolver from a ClusterSpec.

        Raises:
          TypeError: If `cluster_spec` is not a `ClusterSpec` or `master` is not
            a string.
        """
        self._task_type = task_type
        self._task_id = task_id
        self._environment = environment
        self._num_accelerators = num_accelerators
        self._rpc_layer = rpc_layer
        if not isinstance(cluster_spec, ClusterSpec):
            raise TypeError("cluster_spec must be a `tf.train.ClusterSpec`.")
        self._cluster_spec = cluster_spec
        if not isinstance(master, str):
            raise TypeError("master must be a string.")
        self._master = master

    def cluster_spec(self) -> ClusterSpec:
        """Returns the ClusterSpec passed into the constructor."""
        return self._cluster_spec

    def master(
        self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None
    ) -> str:
        """Returns the master address to use when creating a session.

        If a task_type and task_id is given, this will override the `master`
        string passed into the initialization function.

        Args:
          task_type: (Optional) The type of the TensorFlow task of the master.
          task_id: (Optional) The index of the TensorFlow task of the master.
          rpc_layer: (Optional) The RPC used by distributed TensorFlow.

        Returns:
          The name or URL of the session master.
        """
        if task_type is not None and task_id is not None:
            master = self.cluster_spec().task_address(task_type, task_id)
        else:
            master = self._master
        return format_master_url(master, rpc_layer=rpc_layer or self._rpc_layer)

    @property
    def environment(self) -> str | None:
        return self._environment

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None, config_proto: Any = None
    ) -> dict[str, int]:
        """Returns the `num_accelerators` given to the constructor (`{}` if none).

        Args:
          task_type: Unused.
          task_id: Unused.
          config_proto: Unused.
        """
        del task_type, task_id, config_proto
        if self._num_accelerators is None:
            return {}
        return self._num_accelerators


class UnionClusterResolver(ClusterResolver):
    """Performs a union on underlying ClusterResolvers.

    `cluster_spec()` merges the underlying cluster specs (see there). Task type,
    task id, RPC layer, environment, number of accelerators and master come from
    the first ClusterResolver unless overridden. As in TF, an override of
    `task_id=0` (or an empty `task_type`/`rpc_layer`) is falsy, so the first
    resolver's value wins.
    """

    def __init__(self, *args: ClusterResolver, **kwargs: Any) -> None:
        """Initializes a UnionClusterResolver with other ClusterResolvers.

        Args:
          *args: `ClusterResolver` objects to be unionized.
          **kwargs:
            rpc_layer - (Optional) Override value for the RPC layer used by
              TensorFlow.
            task_type - (Optional) Override value for the current task type.
            task_id - (Optional) Override value for the current task index.

        Raises:
          TypeError: If any argument is not a subclass of `ClusterResolvers`.
          ValueError: If there are no arguments passed.
        """
        self._rpc_layer = kwargs.pop("rpc_layer", None)
        self._task_type = kwargs.pop("task_type", None)
        self._task_id = kwargs.pop("task_id", None)
        if kwargs:
            raise ValueError(f"Unexpected kwargs provided {kwargs!r}")
        if not args:
            raise ValueError("At least one ClusterResolver is required.")
        for cluster_resolver in args:
            if not isinstance(cluster_resolver, ClusterResolver):
                raise TypeError("All arguments must be a sub-class of `ClusterResolver.`")
        self._cluster_resolvers = args

    def cluster_spec(self) -> ClusterSpec:
        """Returns a union of all the ClusterSpecs from the ClusterResolvers.

        If *all* underlying ClusterSpecs expose the tasks of a job as lists, the
        lists are concatenated in argument order. If *any* exposes them as a
        dict, all are treated as dicts (a list's indices are 0..n-1) and merged
        only if no task index repeats.

        Returns:
          A ClusterSpec containing host information merged from all the
          underlying ClusterResolvers.

        Raises:
          KeyError: If there are conflicting keys detected when merging two or
            more dictionaries.
        """
        cluster_dicts = [r.cluster_spec().as_dict() for r in self._cluster_resolvers]
        merged: dict[Any, Any] = {}
        for cluster_dict in cluster_dicts:
            for job_name, tasks in cluster_dict.items():
                if job_name in merged:
                    if isinstance(tasks, dict):
                        merged[job_name] = {}
                else:
                    merged[job_name] = [] if isinstance(tasks, list) else {}
        for cluster_dict in cluster_dicts:
            for job_name, tasks in cluster_dict.items():
                if isinstance(merged[job_name], list):
                    merged[job_name].extend(tasks)
                    continue
                task_dict = dict(enumerate(tasks)) if isinstance(tasks, list) else dict(tasks)
                intersected_keys = set(task_dict).intersection(merged[job_name])
                if intersected_keys:
                    raise KeyError(
                        "Duplicate keys detected when merging two ClusterSpecs: "
                        f"{intersected_keys!r}"
                    )
                merged[job_name].update(task_dict)
        return ClusterSpec(merged)

    def master(
        self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None
    ) -> str:
        """Returns the master address to use when creating a session.

        This usually returns the master from the first ClusterResolver passed
        in, but you can override this by specifying the task_type and task_id.

        Args:
          task_type: (Optional) The type of the TensorFlow task of the master.
          task_id: (Optional) The index of the TensorFlow task of the master.
          rpc_layer: (Optional) The RPC protocol for the given cluster.

        Returns:
          The name or URL of the session master.
        """
        if task_type is not None and task_id is not None:
            master = self.cluster_spec().task_address(task_type, task_id)
            # As TF: only this union's own rpc_layer override applies here.
            return format_master_url(master, rpc_layer or self._rpc_layer)
        return self._cluster_resolvers[0].master(rpc_layer=rpc_layer)

    @property
    def task_type(self) -> str | None:
        return self._task_type or self._cluster_resolvers[0].task_type

    @task_type.setter
    def task_type(self, task_type: str | None) -> None:
        self._task_type = task_type

    @property
    def task_id(self) -> int | None:
        return self._task_id or self._cluster_resolvers[0].task_id

    @task_id.setter
    def task_id(self, task_id: int | None) -> None:
        self._task_id = task_id

    @property
    def environment(self) -> str | None:
        return self._cluster_resolvers[0].environment

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None, config_proto: Any = None
    ) -> dict[str, int]:
        """Returns the first ClusterResolver's `num_accelerators`."""
        return self._cluster_resolvers[0].num_accelerators(task_type, task_id, config_proto)

    @property
    def rpc_layer(self) -> str | None:
        return self._rpc_layer or self._cluster_resolvers[0].rpc_layer

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer: str | None) -> None:
        self._rpc_layer = rpc_layer


UnionResolver = UnionClusterResolver
