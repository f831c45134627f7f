"""TFConfigClusterResolver: reads TF_CONFIG exactly as TF does, so TF_CONFIG users run unchanged."""

from __future__ import annotations

from typing import Any

from mwms_mpi import _env
from mwms_mpi.cluster.resolver import ClusterResolver, format_master_url
from mwms_mpi.cluster.spec import ClusterSpec

TF_CONFIG_ENV = "TF_CONFIG"
SESSION_MASTER_KEY = "session_master"
RPC_LAYER_KEY = "rpc_layer"
TASK_KEY = "task"
CLUSTER_KEY = "cluster"


def tf_config_set(environ: _env.Environ = None) -> bool:
    """Whether ``TF_CONFIG`` is set and not blank: the default resolver then reads it.

    (TF always uses `TFConfigClusterResolver`, and a blank `TF_CONFIG` fails there as
    invalid JSON; mwms_mpi takes blank as unset and resolves the cluster from MPI.)
    """
    return _env.env_str(TF_CONFIG_ENV, environ) is not None


def _load_tf_config() -> Any:
    """TF_CONFIG parsed, on every call, as TF does: a bad TF_CONFIG fails on use, not on
    construction, with TF's error types (`json.JSONDecodeError`, `TypeError`), naming it."""
    text = _env.env_raw(TF_CONFIG_ENV)
    tf_config = _env.parse_json(TF_CONFIG_ENV, "{}" if text is None else text)
    if not hasattr(tf_config, "__contains__"):  # TF: `argument of type 'int' is not iterable`
        raise TypeError(
            f"Environment variable {TF_CONFIG_ENV}={text!r} is not a JSON object (TF reads it "
            f"with `in`: argument of type {type(tf_config).__name__!r} is not iterable)"
        )
    return tf_config


def _get_value_in_tfconfig(key: str, default: Any = None) -> Any:
    tf_config = _load_tf_config()
    # Not .get(): TF_CONFIG may hold a JSON list, where TF's `in` test simply fails.
    return tf_config[key] if key in tf_config else default  # noqa: SIM401


def _task_index(value: Any) -> int:
    """`int(task["index"])` as TF converts it; a failure names TF_CONFIG (TF's error type)."""
    try:
        return int(value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{TF_CONFIG_ENV} task index {value!r}: {e}") from None


class TFConfigClusterResolver(ClusterResolver):
    """Implementation of a ClusterResolver which reads the TF_CONFIG EnvVar.

    An example to set TF_CONFIG is:

    ```python
    os.environ['TF_CONFIG'] = json.dumps({
      'cluster': {
          'worker': ["localhost:12345", "localhost:23456"]
      },
      'task': {'type': 'worker', 'index': 0}
    })
    ```

    As in TF, `TF_CONFIG` is parsed again on every call (a malformed value
    raises `json.JSONDecodeError` on use, not at construction; one that is
    not a JSON object or list raises `TypeError`; the messages, unlike TF's,
    name `TF_CONFIG`), and `environment` comes from the constructor only,
    never from `TF_CONFIG`.
    """

    def __init__(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
        environment: str | None = None,
    ) -> None:
        """Creates a new TFConfigClusterResolver.

        Args:
          task_type: (String, optional) Overrides the task type specified in the
            TF_CONFIG environment variable.
          task_id: (Integer, optional) Overrides the task index specified in the
            TF_CONFIG environment variable.
          rpc_layer: (String, optional) Overrides the rpc layer TensorFlow uses.
          environment: (String, optional) Overrides the environment TensorFlow
            operates in.
        """
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self._environment = environment

    @property
    def task_type(self) -> str | None:
        if self._task_type is None:
            task_info = _get_value_in_tfconfig(TASK_KEY, {})
            return str(task_info["type"]) if "type" in task_info else None
        return str(self._task_type)

    @task_type.setter
    def task_type(self, task_type: str | None) -> None:
        self._task_type = task_type

    @property
    def task_id(self) -> int | None:
        if self._task_id is None:
            task_info = _get_value_in_tfconfig(TASK_KEY, {})
            return _task_index(task_info["index"]) if "index" in task_info else None
        return int(self._task_id)

    @task_id.setter
    def task_id(self, task_id: int | None) -> None:
        self._task_id = task_id

    @property
    def environment(self) -> str | None:
        return self._environment

    @property
    def rpc_layer(self) -> str | None:
        if self._rpc_layer is None:
            value: str | None = _get_value_in_tfconfig(RPC_LAYER_KEY)
            return value
        return self._rpc_layer

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer: str | None) -> None:
        self._rpc_layer = rpc_layer

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None, config_proto: Any = None
    ) -> dict[str, int]:
        """Returns an empty `defaultdict(int)`: TF_CONFIG says nothing about accelerators.

        As TF, it first resolves `master(task_type, task_id)` for this task
        (raising its errors). TF then queries its local device runtime; mwms_mpi
        has none. Wrap this resolver in a `UnionClusterResolver` with a
        `SimpleClusterResolver` carrying `num_accelerators` to set it.
        """
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        return super().num_accelerators(task_type, task_id, config_proto)

    def cluster_spec(self) -> ClusterSpec:
        """Returns a ClusterSpec based on the TF_CONFIG environment variable.

        Returns:
          A ClusterSpec with information from the TF_CONFIG environment variable.
        """
        tf_config = _load_tf_config()
        if CLUSTER_KEY not in tf_config:
            return ClusterSpec({})
        return ClusterSpec(tf_config[CLUSTER_KEY])

    def master(
        self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None
    ) -> str:
        """Returns the master address to use when creating a TensorFlow session.

        Note: this is only useful for TensorFlow 1.x.

        Args:
          task_type: (String, optional) Overrides and sets the task_type of the
            master.
          task_id: (Integer, optional) Overrides and sets the task id of the
            master.
          rpc_layer: (String, optional) Overrides and sets the protocol over
            which TensorFlow nodes communicate with each other.

        Returns:
          The address of the master.

        Raises:
          ValueError: If the task_type or task_id is not specified and the
            `TF_CONFIG` environment variable does not contain a task section
            (TF documents RuntimeError, but raises this ValueError from
            `ClusterSpec.task_address`).
        """
        session_master = _get_value_in_tfconfig(SESSION_MASTER_KEY)
        if session_master is not None:
            # As TF: the JSON value itself, not converted (a number stays a number).
            return session_master
        cluster_spec = self.cluster_spec()
        if not cluster_spec.jobs or (
            len(cluster_spec.jobs) == 1 and len(cluster_spec.job_tasks(cluster_spec.jobs[0])) == 1
        ):
            return ""
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        rpc_layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        return format_master_url(cluster_spec.task_address(task_type, task_id), rpc_layer)
