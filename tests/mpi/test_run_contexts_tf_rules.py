"""``ReplicaContext.devices`` under MultiWorkerMirroredStrategy, worker by worker, as TF 2.21.

TF's ``_MirroredReplicaContext.devices`` is ``[worker_devices_by_replica[replica_id]]``, the
worker's own list indexed with the global replica id: TF 2.21.0 on two loopback ``TF_CONFIG``
workers (one CPU replica each; a scratch program) answered
``[['/job:worker/replica:0/task:0/device:CPU:0']]`` on worker 0 and raised ``IndexError: list
index out of range`` on worker 1. With two local replicas the ids of worker 1 are 2 and 3, past
its list of two, the same indexing. The single-process side is
``tests/unit/test_run_contexts_tf_rules.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

import mwms_mpi.distribute as ds
from tests.support.mpi import all_ranks_ok, rank_size

pytestmark = pytest.mark.mpi


def test_devices_indexes_this_workers_list_with_the_global_id(
    strategy: Any, test_comm: Any
) -> None:
    rank, _ = rank_size()
    seen: dict[int, Any] = {}

    def fn() -> None:
        rc = ds.get_replica_context()
        try:
            seen[int(rc.replica_id_in_sync_group)] = rc.devices
        except IndexError as exc:
            seen[int(rc.replica_id_in_sync_group)] = f"IndexError: {str(exc).split(':')[0]}"

    strategy.run(fn)
    local = strategy.extended.worker_devices
    if rank == 0:
        expected: dict[int, Any] = {i: [[d]] for i, d in enumerate(local)}
    else:
        k = len(local)
        expected = {rank * k + i: "IndexError: list index out of range" for i in range(k)}
    assert all_ranks_ok(test_comm, seen == expected), (seen, expected)
