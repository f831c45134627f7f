"""Deterministic sums give one set of bits under every Allreduce algorithm and world size.

The MPI library chooses how partial sums meet (recursive doubling, ring, tree, ...), and the
order changes a plain float sum's last bits; the launcher's family decides which knob forces an
algorithm. Each run prints a hash of the exact sums of the same 12 logical replicas' values
(12 = 1 x 12 = 2 x 6 = 3 x 4 = 4 x 3; float32 over 2**+-40 and float64 over 2**+-300 with
exact cancellations), and of a batch at two ``bytes_per_pack``: every run must print
the same hashes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.launch import json_records, mpiexec, run_mpi, write_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = """
    import hashlib, json
    import numpy as np
    from mwms_mpi.collective import Communicator
    from mwms_mpi.config import experimental
    from mwms_mpi.types import CommunicationOptions

    experimental.enable_op_determinism()
    comm = Communicator()
    k = 12 // comm.size
    rng = np.random.default_rng(7)
    scale = 2.0 ** rng.integers(-40, 40, (12, 5000))
    replicas = (rng.standard_normal((12, 5000)) * scale).astype(np.float32)
    wide = rng.standard_normal((12, 700)) * 2.0 ** rng.integers(-300, 300, (12, 700))
    wide[3::4] = -wide[2::4]  # exact cancellation between replicas
    mine = list(replicas[comm.rank * k : (comm.rank + 1) * k])
    sums = comm.all_reduce_addends(mine)
    means = comm.all_reduce_addends(mine, divisor=12)
    wide_sums = comm.all_reduce_addends(list(wide[comm.rank * k : (comm.rank + 1) * k]))
    # a batch: one addend per rank, so only the runs of one world size compare here
    batch = [replicas[comm.rank, :3000], replicas[comm.rank, 3000:].astype(np.float64)]
    packed = [comm.batch_all_reduce(batch, options=CommunicationOptions(bytes_per_pack=b))
              for b in (0, 4096)]
    digest = lambda *arrays: hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()
    record = {"rank": comm.rank, "size": comm.size, "sums": digest(sums, means, wide_sums),
              "batch": [digest(*p) for p in packed]}
    print(json.dumps(record), flush=True)
"""

# What forces an Allreduce algorithm, per launcher family (the family's own variables).
ALGORITHMS = {
    "mpich": [
        {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": name}
        for name in ("recursive_doubling", "reduce_scatter_allgather", "ring", "tree", "recexch")
    ],
    "intel": [{"I_MPI_ADJUST_ALLREDUCE": str(i)} for i in (1, 2, 3, 5, 6)],
    "openmpi": [
        {
            "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_allreduce_algorithm": str(i),
        }
        for i in (1, 3, 4, 6)
    ],
}


def _run(tmp_path: Path, ranks: int, env: dict[str, str]) -> list[dict[str, object]]:
    script = write_script(tmp_path, "sums.py", SCRIPT)
    result = run_mpi(ranks, [sys.executable, script], timeout=120, env=env)
    assert result.returncode == 0, result.describe()
    records = json_records(result.stdout)
    assert len(records) == ranks, result.describe()
    return records


def test_one_set_of_bits_for_every_algorithm_and_world_size(tmp_path: Path) -> None:
    family = mpiexec().family.name
    sums: set[object] = set()
    batches: set[object] = set()
    for env in ALGORITHMS[family]:
        records = _run(tmp_path, 4, env)
        sums |= {r["sums"] for r in records}
        batches |= {tuple(r["batch"]) for r in records}  # type: ignore[arg-type]
    for ranks in (1, 2, 3):
        sums |= {r["sums"] for r in _run(tmp_path, ranks, {})}
    assert len(sums) == 1, f"exact sums differ between runs: {sums}"
    assert len(batches) == 1, f"a batch differs between algorithms: {batches}"
    (pair,) = batches
    assert pair[0] == pair[1], "bytes_per_pack changed the bits"  # type: ignore[index]
