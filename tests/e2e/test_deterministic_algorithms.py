"""Deterministic sums give the reference's bits under every Allreduce algorithm and world size.

The MPI library chooses how partial sums meet (recursive doubling, ring, tree, ...), and the
order changes a plain float sum's last bits; the launcher's family decides which knob forces an
algorithm. Each run sums the same 12 logical replicas' values (12 = 1 x 12 = 2 x 6 = 3 x 4 =
4 x 3; float32 over 2**+-40 and float64 over 2**+-300 with exact cancellations), and a batch at
two ``bytes_per_pack``, and prints their hashes: every run must print the hashes of the
independent IEEE-754 reference (tests/support/ieee_reference.py, which imports nothing from
mwms_mpi), not merely the same hashes as the other runs.

The control: with op determinism off, each run also hashes a plain float32 SUM, whose bits
depend on the order MPI adds in. The knobs must change them (at least
:data:`DISTINCT_PLAIN_SUMS` different hashes over a family's knobs at 4 ranks), so a knob that
the library ignores (a misspelled variable name) cannot pass as "every algorithm agreed".
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.ieee_reference import known_deviations, reference_sum
from tests.support.launch import json_records, mpiexec, run_mpi, write_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = """
    import hashlib, json, sys
    import numpy as np
    from mwms_mpi.collective import Communicator
    from mwms_mpi.config import experimental
    from mwms_mpi.types import CommunicationOptions

    data = np.load(sys.argv[1])
    replicas, wide = data["replicas"], data["wide"]
    experimental.enable_op_determinism()
    comm = Communicator()
    k = 12 // comm.size
    mine = list(replicas[comm.rank * k : (comm.rank + 1) * k])
    sums = comm.all_reduce_addends(mine)
    means = comm.all_reduce_addends(mine, divisor=12)
    wide_sums = comm.all_reduce_addends(list(wide[comm.rank * k : (comm.rank + 1) * k]))
    # a batch: one addend per rank, so only the runs of one world size compare here
    batch = [replicas[comm.rank, :3000], replicas[comm.rank, 3000:].astype(np.float64)]
    packed = [comm.batch_all_reduce(batch, options=CommunicationOptions(bytes_per_pack=b))
              for b in (0, 4096)]
    # the control: a plain float sum, one addend per rank, added in MPI's order
    experimental.disable_op_determinism()
    plain = comm.all_reduce(replicas[comm.rank].copy())
    digest = lambda *arrays: hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()
    record = {"rank": comm.rank, "size": comm.size, "sums": digest(sums, means, wide_sums),
              "batch": [digest(*p) for p in packed], "plain": digest(plain)}
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

# Different plain-sum hashes the knobs must give at 4 ranks. MPICH 5.0 (measured): ring and
# tree each add in their own order; recursive doubling, reduce-scatter-allgather and recexch
# all pair (0+1)+(2+3) at 4 ranks, so they agree. Intel MPI and Open MPI: not measured here,
# so only "the knobs change something".
DISTINCT_PLAIN_SUMS = {"mpich": 3, "intel": 2, "openmpi": 2}


def _data() -> tuple[np.ndarray, np.ndarray]:
    """12 replicas' float32 values over 2**+-40, and float64 over 2**+-300 whose replicas
    3, 7, 11 cancel replicas 2, 6, 10 exactly (the far addends' sum is then the result)."""
    rng = np.random.default_rng(7)
    scale = 2.0 ** rng.integers(-40, 40, (12, 5000))
    replicas = (rng.standard_normal((12, 5000)) * scale).astype(np.float32)
    wide = rng.standard_normal((12, 700)) * 2.0 ** rng.integers(-300, 300, (12, 700))
    wide[3::4] = -wide[2::4]
    return replicas, wide


def _digest(*arrays: np.ndarray) -> str:
    return hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()


def _exact(addends: list[np.ndarray], divisor: int = 1) -> np.ndarray:
    """The independent reference for these addends (exact.py's grid for their count)."""
    r = len(addends)
    deviations = known_deviations(addends[0].dtype, divisor, r)  # known bugs: ieee_reference
    return reference_sum(addends, divisor, grid_addends=r, **deviations)


def _reference_hashes(replicas: np.ndarray, wide: np.ndarray) -> tuple[str, str]:
    """What every run must print: the sums' hash, and the batch's at 4 ranks."""
    sums = _digest(_exact(list(replicas)), _exact(list(replicas), 12), _exact(list(wide)))
    batch = _digest(
        _exact(list(replicas[:4, :3000])),
        _exact([r.astype(np.float64) for r in replicas[:4, 3000:]]),
    )
    return sums, batch


def _run(tmp_path: Path, data: Path, ranks: int, env: dict[str, str]) -> list[dict[str, Any]]:
    script = write_script(tmp_path, "sums.py", SCRIPT)
    result = run_mpi(ranks, [sys.executable, script, data], timeout=120, env=env)
    assert result.returncode == 0, result.describe()
    records = json_records(result.stdout)
    assert len(records) == ranks, result.describe()
    return records


def test_the_reference_bits_for_every_algorithm_and_world_size(tmp_path: Path) -> None:
    family = mpiexec().family.name
    replicas, wide = _data()
    data = tmp_path / "data.npz"
    np.savez(data, replicas=replicas, wide=wide)
    sums: set[object] = set()
    batches: set[object] = set()
    plain: dict[str, set[object]] = {}
    for env in ALGORITHMS[family]:
        records = _run(tmp_path, data, 4, env)
        sums |= {r["sums"] for r in records}
        batches |= {tuple(r["batch"]) for r in records}
        plain[str(env)] = {r["plain"] for r in records}
    for ranks in (1, 2, 3):
        sums |= {r["sums"] for r in _run(tmp_path, data, ranks, {})}
    want_sums, want_batch = _reference_hashes(replicas, wide)
    assert sums == {want_sums}, f"exact sums differ from the reference or between runs: {sums}"
    assert batches == {(want_batch, want_batch)}, f"a batch is not the reference: {batches}"
    # the control: every rank of a run agrees, and the knobs change a plain sum's bits
    assert all(len(h) == 1 for h in plain.values()), f"ranks disagree on a plain sum: {plain}"
    distinct = {next(iter(h)) for h in plain.values()}
    assert len(distinct) >= DISTINCT_PLAIN_SUMS[family], (
        f"{family}: the algorithm knobs gave {len(distinct)} different plain float sums, not "
        f"{DISTINCT_PLAIN_SUMS[family]}: some knob has no effect (misspelled?): {plain}"
    )
