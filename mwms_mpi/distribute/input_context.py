"""InputContext, InputOptions, ValueContext: what input functions and value functions are told."""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

__all__ = ["InputContext", "InputOptions", "InputReplicationMode", "ValueContext"]


class InputReplicationMode(enum.Enum):
    """Replication mode for input function.

    * ``PER_WORKER``: The input function will be called on each worker independently, creating
      as many input pipelines as number of workers. Replicas will dequeue from the local
      Dataset on their worker.
    * ``PER_REPLICA``: The input function will be called on each replica separately.
    """

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


class InputContext:
    """A class wrapping information needed by an input function.

    This is a context class that is passed to the user's input function and contains
    information about the compute replicas and input pipelines. The number of compute replicas
    (in sync training) helps compute the local batch size from the desired global batch size
    for each replica. The input pipeline information can be used to return a different subset
    of the input in each replica (for e.g. shard the input pipeline, use a different input
    source etc).

    Args:
      num_input_pipelines: the number of input pipelines in a cluster.
      input_pipeline_id: the current input pipeline id, should be an int in
        [0,`num_input_pipelines`).
      num_replicas_in_sync: the number of replicas that are in sync.
    """

    __slots__ = ("_input_pipeline_id", "_num_input_pipelines", "_num_replicas_in_sync")

    def __init__(
        self,
        num_input_pipelines: int = 1,
        input_pipeline_id: int = 0,
        num_replicas_in_sync: int = 1,
    ) -> None:
        self._num_input_pipelines = num_input_pipelines
        self._input_pipeline_id = input_pipeline_id
        self._num_replicas_in_sync = num_replicas_in_sync

    @property
    def num_replicas_in_sync(self) -> int:
        """Returns the number of compute replicas in sync."""
        return self._num_replicas_in_sync

    @property
    def input_pipeline_id(self) -> int:
        """Returns the input pipeline ID."""
        return self._input_pipeline_id

    @property
    def num_input_pipelines(self) -> int:
        """Returns the number of input pipelines."""
        return self._num_input_pipelines

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """Returns the per-replica batch size.

        Args:
          global_batch_size: the global batch size which should be divisible by
            `num_replicas_in_sync`.

        Returns:
          the per-replica batch size.

        Raises:
          ValueError: if `global_batch_size` not divisible by `num_replicas_in_sync`.
        """
        if global_batch_size % self._num_replicas_in_sync != 0:
            raise ValueError(
                f"The `global_batch_size` {global_batch_size!r} is not divisible by "
                f"`num_replicas_in_sync` {self._num_replicas_in_sync!r} "
            )
        return global_batch_size // self._num_replicas_in_sync

    def __str__(self) -> str:
        return (
            f"tf.distribute.InputContext(input pipeline id {self.input_pipeline_id}, "
            f"total: {self.num_input_pipelines})"
        )


class ValueContext:
    """A class wrapping information needed by a distribute function.

    This is a context class that is passed to the `value_fn` in
    `strategy.experimental_distribute_values_from_function` and contains information about the
    compute replicas. The `num_replicas_in_sync` and `replica_id` can be used to customize the
    value on each replica.

    Args:
      replica_id_in_sync_group: the current replica_id, should be an int in
        [0,`num_replicas_in_sync`).
      num_replicas_in_sync: the number of replicas that are in sync.
    """

    __slots__ = ("_num_replicas_in_sync", "_replica_id_in_sync_group")

    def __init__(self, replica_id_in_sync_group: int = 0, num_replicas_in_sync: int = 1) -> None:
        self._replica_id_in_sync_group = replica_id_in_sync_group
        self._num_replicas_in_sync = num_replicas_in_sync

    @property
    def num_replicas_in_sync(self) -> int:
        """Returns the number of compute replicas in sync."""
        return self._num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self) -> int:
        """Returns the replica ID."""
        return self._replica_id_in_sync_group

    def __str__(self) -> str:
        # TF's text, double space included.
        return (
            f"tf.distribute.ValueContext(replica id {self.replica_id_in_sync_group},  "
            f"total replicas in sync: {self.num_replicas_in_sync})"
        )


class _InputOptionsFields(NamedTuple):
    experimental_fetch_to_device: Any
    experimental_replication_mode: Any
    experimental_place_dataset_on_device: Any
    experimental_per_replica_buffer_size: Any


class InputOptions(_InputOptionsFields):
    """Run options for `experimental_distribute_dataset(s_from_function)`.

    A namedtuple, as TF's.

    Attributes:
      experimental_fetch_to_device: Boolean. If True, dataset elements will be prefetched to
        accelerator device memory. When False, dataset elements are prefetched to host device
        memory. Default behavior (``None``) is same as setting it to True.
      experimental_replication_mode: Replication mode for the input function. The default
        value is InputReplicationMode.PER_WORKER.
      experimental_place_dataset_on_device: Boolean. Default to False. When True, dataset will
        be placed on the device, otherwise it will remain on the host.
      experimental_per_replica_buffer_size: Integer. Default to 1. Indicates the prefetch
        buffer size in the replica device memory.
    """

    __slots__ = ()

    def __new__(
        cls,
        experimental_fetch_to_device: bool | None = None,
        experimental_replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER,
        experimental_place_dataset_on_device: bool = False,
        experimental_per_replica_buffer_size: int = 1,
    ) -> InputOptions:
        if experimental_fetch_to_device is None:
            experimental_fetch_to_device = True
        return super().__new__(
            cls,
            experimental_fetch_to_device,
            experimental_replication_mode,
            experimental_place_dataset_on_device,
            experimental_per_replica_buffer_size,
        )
