"""How TF 2.21 auto-shards and rebatches a dataset per worker (experimental_distribute_dataset).

Mirrors ``tensorflow/python/data/experimental/ops/distribute.py`` and ``input_lib``'s
``_create_cloned_datasets_from_dataset``; docs/input_semantics.md has the verified behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mwms_mpi import errors, nest
from mwms_mpi._tf_text import tf_shape_string
from mwms_mpi.data import _pipeline
from mwms_mpi.data.dataset import Dataset
from mwms_mpi.data.options import AutoShardPolicy

__all__ = [
    "auto_shard_dataset",
    "batch_sizes_for_worker",
    "compute_batch_size",
    "dataset_for_worker",
    "legacy_rebatch",
]


def compute_batch_size(dataset: Dataset) -> int:
    """Returns the batch size of the dataset sans partial batches, or -1, as TF does.

    From the element spec if every component's leading dim is known (-1 if they differ);
    otherwise from the pipeline, as TF's ``ComputeBatchSize`` walks it (:func:`_walked_batch_size`).

    Raises:
      IndexError: an element component is a scalar (TF fails so on unbatched datasets).
    """
    specs = nest.flatten(dataset.element_spec)
    if any(not spec.shape for spec in specs):
        raise IndexError(
            "list index out of range (tf.distribute needs a batched dataset: its elements are "
            "scalars; call `batch` on it)"
        )
    dims = [spec.shape[0] for spec in specs]
    if all(dim is not None for dim in dims):
        return dims[0] if all(dim == dims[0] for dim in dims) else -1
    return _walked_batch_size(dataset._node)


def _walked_batch_size(node: _pipeline.Node) -> int:
    """The batch size of the ``batch`` upstream of ``node``, or -1 (TF's ``ComputeBatchSize``
    kernel): through transformations that keep the batch size (filter, repeat, take, skip,
    shuffle, prefetch, cache, shard) to their input; through a zip or a concatenation to every
    input, where they must all agree; -1 at anything else (``map``, ``unbatch``, ``rebatch``,
    a source)."""
    if isinstance(node, _pipeline.Batch):
        return node.batch_size
    if node.joins_batches:
        sizes = {_walked_batch_size(upstream) for upstream in node.inputs}
        return sizes.pop() if len(sizes) == 1 else -1
    if node.preserves_batch and node.inputs:
        return _walked_batch_size(node.inputs[0])
    return -1


def batch_sizes_for_worker(
    global_batch_size: int, num_workers: int, num_replicas_per_worker: int, worker_index: int
) -> list[int]:
    """Determines how to rebatch a dataset for the given worker (TF's rule).

    Of the ``W * R`` sub-batches a global batch ``B`` is split into, ``B mod (W * R)`` have
    size ``ceil(B / (W * R))`` and the rest ``floor``; worker ``i``'s list is worker 0's rotated
    left by ``i * R``, so that every global step consumes exactly ``B`` elements.

    Args:
      global_batch_size: the global batch size.
      num_workers: the number of workers the dataset will be distributed across.
      num_replicas_per_worker: the number of replicas per worker.
      worker_index: the index of the worker to be rebatched.

    Returns:
      The batch sizes to rebatch the dataset into, one per sub-batch.
    """
    num_subbatches = num_workers * num_replicas_per_worker
    offset = worker_index * num_replicas_per_worker
    floor = global_batch_size // num_subbatches
    num_ceil = global_batch_size - num_subbatches * floor
    worker_0 = [floor + 1] * num_ceil + [floor] * (num_subbatches - num_ceil)
    return worker_0[offset:] + worker_0[:offset]


def legacy_rebatch(dataset: Dataset, num_replicas: int) -> Dataset:
    """Splits every element into ``num_replicas`` pieces of ``ceil(batch / num_replicas)`` rows.

    TF's legacy ``RebatchDataset``: the last pieces may be shorter or empty (a batch of 5 over
    4 replicas gives 2, 2, 1, 0 rows).

    Raises:
      ValueError: an element component is a scalar.
    """
    return dataset._then(_pipeline.LegacyRebatch(dataset._node, num_replicas))


def _shard_by_data(
    node: _pipeline.Node, num_shards: int, index: int, replicas: int
) -> _pipeline.Node:
    """TF's ``ShardByData``: below the trailing prefetches, a ``rebatch`` (the one
    :func:`dataset_for_worker` adds, or with one replica a user's own) becomes a legacy
    rebatch over ``replicas``, and ``shard(num_shards, index)`` goes there. A ``rebatch``
    further upstream stays as it is."""
    if isinstance(node, _pipeline.Prefetch):
        return node.with_input(_shard_by_data(node.inputs[0], num_shards, index, replicas))
    if isinstance(node, _pipeline.Rebatch):
        node = _pipeline.LegacyRebatch(node.inputs[0], replicas)
    return _pipeline.Shard(node, num_shards, index)


class _KeepSpec(_pipeline.Node):
    """Its input, reported with ``spec``: TF's ``_AutoShardDataset`` keeps the element spec of
    the pipeline it rewrites (a user's rebatch made a legacy one keeps the rebatch's spec)."""

    def __init__(self, node: _pipeline.Node, spec: Any) -> None:
        self.inputs = (node,)
        self.spec = spec

    def element_spec(self) -> Any:
        return self.spec

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        specs = nest.flatten(self.spec)
        for element in self.inputs[0].iterate(peek):
            for index, (array, spec) in enumerate(zip(nest.flatten(element), specs, strict=True)):
                if not spec.is_compatible_with(array):  # TF's iterator checks its output
                    expected = ",".join("?" if d is None else str(d) for d in spec.shape)
                    raise errors.InvalidArgumentError(
                        None,
                        "IteratorGetNext",
                        f"Incompatible shapes at component {index}: expected [{expected}] but "
                        f"got {tf_shape_string(array.shape)}.",
                    )
            yield element


def auto_shard_dataset(
    dataset: Dataset, num_shards: int, index: int, num_replicas_in_sync: int | None = None
) -> Dataset:
    """Shards the pipeline per its ``auto_shard_policy``, as TF's ``AutoShardDataset``.

    * ``OFF``: the dataset unchanged.
    * ``AUTO`` and ``DATA`` (mwms_mpi datasets read no files, so AUTO falls back to DATA):
      a ``rebatch`` at the end (below trailing prefetches) becomes a legacy rebatch over
      ``num_replicas_in_sync`` and ``shard(num_shards, index)`` is added there; the result
      keeps the input's ``element_spec``, as TF's ``_AutoShardDataset`` does.
    * ``FILE``: iterating fails with ``NotFoundError`` (no file-reading source), except at one
      shard, index 0, where TF's ``AutoShard`` optimisation applies no policy at all (its
      ``OptimizeGraph`` skips FILE there): the dataset unchanged.
    * ``HINT``: unchanged (there are no ``SHARD_HINT`` placeholders).

    Args:
      dataset: the dataset to shard.
      num_shards: the number of shards operating in parallel (workers).
      index: the worker index.
      num_replicas_in_sync: the total number of replicas across all workers.

    Returns:
      The sharded dataset.
    """
    policy = dataset.options().experimental_distribute.auto_shard_policy
    if policy in (AutoShardPolicy.OFF, AutoShardPolicy.HINT):
        return dataset
    if policy == AutoShardPolicy.FILE and num_shards == 1 and index == 0:
        return dataset
    node = dataset._node
    if policy == AutoShardPolicy.FILE:
        source = node
        while source.inputs:
            source = source.inputs[0]
        error = errors.NotFoundError(
            None,
            "AutoShardDataset",
            f"Found an unshardable source dataset: {type(source).__name__}Dataset",
        )
        return dataset._then(_pipeline.Fail(node, error))
    replicas = 1 if num_replicas_in_sync is None else num_replicas_in_sync
    sharded = _shard_by_data(node, num_shards, index, replicas)
    return dataset._then(_KeepSpec(sharded, dataset.element_spec))


def dataset_for_worker(
    dataset: Dataset, num_workers: int, worker_index: int, num_replicas_in_sync: int
) -> Dataset:
    """The stream of per-replica batches that ``worker_index`` reads, as TF 2.21 builds it.

    TF's ``experimental_distribute_dataset`` for a multi-worker strategy: if
    ``num_replicas_in_sync > 1`` the dataset is first rebatched, with ``rebatch`` over
    ``batch_sizes_for_worker`` when the batch size is known, else with a legacy rebatch into
    ``num_replicas_in_sync`` pieces; then ``auto_shard_dataset`` (which turns that rebatch into
    a legacy one under AUTO/DATA). The worker's ``R`` local replicas take ``R`` consecutive
    elements of the result per step.

    Args:
      dataset: the (globally batched) dataset.
      num_workers: the number of workers (input pipelines).
      worker_index: this worker's index.
      num_replicas_in_sync: the number of replicas across all workers.

    Returns:
      This worker's dataset.

    Raises:
      ValueError: ``num_replicas_in_sync`` is not a multiple of ``num_workers``.
      IndexError: the dataset is not batched and ``num_replicas_in_sync > 1``.
    """
    if num_replicas_in_sync > 1:
        if num_replicas_in_sync % num_workers:
            raise ValueError(
                "tf.distribute expects every worker to have the same number of replicas. "
                f"However, encountered `num_replicas_in_sync` ({num_replicas_in_sync}) that "
                f"cannot be divided by `num_workers` ({num_workers})"
            )
        per_worker = num_replicas_in_sync // num_workers
        batch_size = compute_batch_size(dataset)
        if batch_size != -1:
            sizes = batch_sizes_for_worker(batch_size, num_workers, per_worker, worker_index)
            # The node itself, as TF makes it: sizes all 0 (batches of 0 rows) are refused only
            # if no AUTO/DATA rewrite replaces it (Rebatch.iterate)
            rebatch = _pipeline.Rebatch(dataset._node, sizes, False)
            dataset = dataset._then(rebatch).prefetch(per_worker)
        else:
            dataset = legacy_rebatch(dataset, num_replicas_in_sync).prefetch(per_worker)
    return auto_shard_dataset(dataset, num_workers, worker_index, num_replicas_in_sync)
