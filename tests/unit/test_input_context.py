"""InputContext, InputOptions, InputReplicationMode and ValueContext against TF 2.21's outputs."""

from __future__ import annotations

import pytest

from mwms_mpi.distribute.input_context import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    ValueContext,
)


def test_input_context_defaults_and_str() -> None:
    # TF: str(tf.distribute.InputContext()) ->
    # 'tf.distribute.InputContext(input pipeline id 0, total: 1)'
    context = InputContext()
    assert (context.num_input_pipelines, context.input_pipeline_id) == (1, 0)
    assert context.num_replicas_in_sync == 1
    assert str(context) == "tf.distribute.InputContext(input pipeline id 0, total: 1)"
    # TF: str(InputContext(2, 1, 4)) -> 'tf.distribute.InputContext(input pipeline id 1, total: 2)'
    context = InputContext(2, 1, 4)
    assert str(context) == "tf.distribute.InputContext(input pipeline id 1, total: 2)"
    assert context.num_replicas_in_sync == 4
    # Real 2-worker MWMS: the dataset_fn saw pipelines=2 id=0|1 rep=2
    kwargs = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    assert kwargs.input_pipeline_id == 1


def test_get_per_replica_batch_size() -> None:
    context = InputContext(2, 1, 4)
    # TF: 2
    assert context.get_per_replica_batch_size(8) == 2
    # TF: ValueError 'The `global_batch_size` 10 is not divisible by `num_replicas_in_sync` 4 '
    with pytest.raises(ValueError) as info:
        context.get_per_replica_batch_size(10)
    assert str(info.value) == (
        "The `global_batch_size` 10 is not divisible by `num_replicas_in_sync` 4 "
    )


def test_input_context_has_no_dict() -> None:
    with pytest.raises(AttributeError):
        InputContext().extra = 1  # type: ignore[attr-defined]


def test_value_context() -> None:
    # TF: 'tf.distribute.ValueContext(replica id 0,  total replicas in sync: 1)', 0, 1
    context = ValueContext()
    assert (context.replica_id_in_sync_group, context.num_replicas_in_sync) == (0, 1)
    assert str(context) == "tf.distribute.ValueContext(replica id 0,  total replicas in sync: 1)"
    # TF docstring: replica 2 of 4 -> 0.5
    context = ValueContext(replica_id_in_sync_group=2, num_replicas_in_sync=4)
    assert context.replica_id_in_sync_group / context.num_replicas_in_sync == 0.5


def test_input_options_like_tf() -> None:
    # TF: repr(tf.distribute.InputOptions()) ->
    expected = (
        "InputOptions(experimental_fetch_to_device=True, "
        "experimental_replication_mode=<InputReplicationMode.PER_WORKER: 'PER_WORKER'>, "
        "experimental_place_dataset_on_device=False, experimental_per_replica_buffer_size=1)"
    )
    options = InputOptions()
    assert repr(options) == expected
    assert isinstance(options, tuple)  # TF's is a namedtuple
    assert options._fields == (
        "experimental_fetch_to_device",
        "experimental_replication_mode",
        "experimental_place_dataset_on_device",
        "experimental_per_replica_buffer_size",
    )
    assert InputOptions(experimental_fetch_to_device=False).experimental_fetch_to_device is False
    replaced = options._replace(experimental_per_replica_buffer_size=3)
    assert replaced.experimental_per_replica_buffer_size == 3
    assert InputOptions() == InputOptions(True, InputReplicationMode.PER_WORKER, False, 1)


def test_input_replication_mode() -> None:
    # TF: InputReplicationMode.PER_WORKER.value -> 'PER_WORKER'
    assert InputReplicationMode.PER_WORKER.value == "PER_WORKER"
    assert InputReplicationMode.PER_REPLICA.value == "PER_REPLICA"
    assert InputReplicationMode("PER_REPLICA") is InputReplicationMode.PER_REPLICA
