"""``padded_batch`` under ``experimental_distribute_dataset`` at any world size, k=1 and k=2 CPU
replicas per rank, against a serial numpy reference computed on every rank.

TF 2.21's ``compute_batch_size`` sees through ``padded_batch`` (it gives the batch size, as for
``batch``; pinned in tests/unit/test_dataset_ops_tf_rules.py, with TF's MirroredStrategy
output), so each global batch is padded first (to its own longest row) and then cut as a plain
batch is: N = W*k pieces of ceil(b/N) rows, piece ``i + l*W`` to worker i's local replica l
(docs/input_semantics.md). Pieces keep the global batch's padded width, empty ones included.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from mwms_mpi.data import Dataset

pytestmark = pytest.mark.mpi


def _row(x: int) -> np.ndarray:
    return np.full((x % 5 + 1,), x, np.float32)


def _padded_reference(n: int, batch: int, width: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The global batches of ``(ids, rows)``: rows padded with -1 to ``width`` or the batch's
    longest row."""
    out = []
    for start in range(0, n, batch):
        ids = np.arange(start, min(n, start + batch), dtype=np.int64)
        rows = [_row(int(i)) for i in ids]
        size = width if width is not None else max(len(r) for r in rows)
        padded = np.full((len(rows), size), -1, np.float32)
        for index, r in enumerate(rows):
            padded[index, : len(r)] = r
        out.append((ids, padded))
    return out


@pytest.mark.parametrize(
    ("n", "batch", "width"), [(11, 4, None), (9, 5, 7), (6, 8, None), (3, 16, None)]
)
def test_padded_batch_pieces_match_the_serial_reference(
    strategy: Any, test_comm: Any, n: int, batch: int, width: int | None
) -> None:
    k = len(strategy.extended.worker_devices)
    workers = strategy.num_replicas_in_sync // k
    rank = int(strategy.extended._id_in_cluster)
    dataset = (
        Dataset.range(n)
        .map(lambda x: (x, _row(int(x))))
        .padded_batch(
            batch,
            padded_shapes=(None if width is None else ([], [width])),
            padding_values=(None, np.float32(-1)),
        )
    )
    pieces_n = workers * k
    consumed: list[np.ndarray] = []
    steps = 0
    for ids, rows in strategy.experimental_distribute_dataset(dataset):
        want_ids, want_rows = _padded_reference(n, batch, width)[steps]
        size = math.ceil(len(want_ids) / pieces_n)
        got = zip(
            strategy.experimental_local_results(ids),
            strategy.experimental_local_results(rows),
            strict=True,
        )
        for local, (got_ids, got_rows) in enumerate(got):
            j = rank + local * workers
            np.testing.assert_array_equal(got_ids, want_ids[j * size : (j + 1) * size])
            expected = want_rows[j * size : (j + 1) * size]
            assert got_rows.shape == expected.shape and got_rows.dtype == np.float32
            assert got_rows.tobytes() == expected.tobytes()
            consumed.append(got_ids)
        steps += 1
    assert steps == math.ceil(n / batch)
    gathered = test_comm.allgather(np.concatenate(consumed) if consumed else np.zeros(0))
    np.testing.assert_array_equal(np.sort(np.concatenate(gathered)), np.arange(n))
