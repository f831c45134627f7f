"""``window`` and ``group_by_window`` under ``experimental_distribute_dataset`` at any world
size, k=1 and k=2 CPU replicas per rank, against a serial numpy reference on every rank.

TF 2.21's ``compute_batch_size`` gives -1 for both (pinned with TF's MirroredStrategy output in
tests/unit/test_dataset_window_tf_rules.py), so each global element (a batch of b rows) takes
the legacy rebatch: N = W*k pieces of ceil(b/N) rows, piece ``i + l*W`` to worker i's local
replica l (docs/input_semantics.md, "The pipeline TF builds per worker").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from mwms_mpi.data import Dataset

pytestmark = pytest.mark.mpi


def _windowed_reference(n: int, size: int, shift: int) -> list[np.ndarray]:
    """``range(n).window(size, shift).flat_map(lambda w: w.batch(size))``: the windows."""
    return [np.arange(s, min(n, s + size), dtype=np.int64) for s in range(0, n, shift)]


def _grouped_reference(n: int, keys: int, size: int) -> list[np.ndarray]:
    """``range(n).group_by_window(lambda x: x * 3 % keys, batch(size), size)``: a batch whenever
    a key has ``size`` elements, then the rest in increasing key order (not the order the keys
    came in: for n=7, keys=5 the rest is [2], [4], [3])."""
    out: list[np.ndarray] = []
    groups: dict[int, list[int]] = {}
    for x in range(n):
        key = x * 3 % keys
        group = groups.setdefault(key, [])
        group.append(x)
        if len(group) == size:
            out.append(np.asarray(groups.pop(key), np.int64))
    out.extend(np.asarray(groups[k], np.int64) for k in sorted(groups))
    return out


def _check(strategy: Any, dataset: Dataset, reference: list[np.ndarray]) -> None:
    k = len(strategy.extended.worker_devices)
    workers = strategy.num_replicas_in_sync // k
    rank = int(strategy.extended._id_in_cluster)
    pieces = workers * k
    steps = 0
    for element in strategy.experimental_distribute_dataset(dataset):
        want = reference[steps]
        size = math.ceil(len(want) / pieces)
        for local, got in enumerate(strategy.experimental_local_results(element)):
            j = rank + local * workers
            expected = want[j * size : (j + 1) * size]
            assert got.dtype == np.int64 and got.shape == expected.shape
            assert got.tobytes() == expected.tobytes()
        steps += 1
    assert steps == len(reference)


@pytest.mark.parametrize(("n", "size", "shift"), [(11, 4, 2), (9, 3, 3), (5, 8, 1)])
def test_window_flat_map_batches_match_the_serial_reference(
    strategy: Any, n: int, size: int, shift: int
) -> None:
    dataset = Dataset.range(n).window(size, shift).flat_map(lambda w: w.batch(size))
    _check(strategy, dataset, _windowed_reference(n, size, shift))


@pytest.mark.parametrize(("n", "keys", "size"), [(20, 2, 4), (13, 4, 3), (7, 5, 2)])
def test_group_by_window_batches_match_the_serial_reference(
    strategy: Any, n: int, keys: int, size: int
) -> None:
    dataset = Dataset.range(n).group_by_window(
        lambda x: x * 3 % keys, lambda key, w: w.batch(size), size
    )
    _check(strategy, dataset, _grouped_reference(n, keys, size))
