"""An NCCL error inside a collective is translated like an MPI one (docs/gpus.md, "Testing").

Found with the fake CuPy's NCCL double: an ``NcclError`` raised inside ``Communicator.all_reduce``
came out as the raw library error, not an ``mwms_mpi.errors`` error, and the communicator was
not poisoned, so its next call went on as if the failed one had completed. A poisoned
communicator ends the job when the program ends (MPI cannot finalize with a collective in
flight), so this runs as its own job (docs/architecture.md, "Testing").
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.launch import REPO_ROOT, run_mpi

PROGRAM = """
import sys
sys.path.insert(0, {root!r})
from tests.support import fake_cupy, fake_nccl
cp = fake_cupy.install()
from mwms_mpi import errors
from mwms_mpi.collective import Communicator
from mwms_mpi.types import CommunicationOptions

with fake_cupy.own_gpus():
    c = Communicator(options=CommunicationOptions(implementation="NCCL"), name="n")
assert float(c.all_reduce(cp.ones(4, cp.float32))[0]) == c.size


def failing(self, *args):
    raise fake_nccl.NcclError(fake_nccl.UNHANDLED_CUDA_ERROR, "injected")


fake_nccl.NcclCommunicator.allReduce = failing
try:
    c.all_reduce(cp.ones(4, cp.float32))
    print("RESULT no error", flush=True)
except Exception as exc:
    found = (type(exc).__name__, isinstance(exc, errors.InternalError), bool(c.poisoned),
             "NcclError" in str(exc))
    sys.stdout.write("RESULT " + " ".join(map(str, found)) + "\\n")  # one write: no interleaving
    sys.stdout.flush()
try:
    c.all_reduce(cp.ones(4, cp.float32))
except errors.UnavailableError:
    print("NEXT unavailable", flush=True)
"""


def test_an_nccl_error_is_an_internal_error_and_poisons_the_communicator(tmp_path: Path) -> None:
    script = tmp_path / "nccl_error.py"
    script.write_text(PROGRAM.format(root=str(REPO_ROOT)))
    result = run_mpi(2, [sys.executable, str(script)], timeout=60)
    assert not result.killed, result.describe()
    # the ranks' lines may interleave (each is one write): count them, not their order
    assert result.stdout.count("InternalError True True True") == 2, result.describe()
    assert result.stdout.count("NEXT unavailable") == 2, result.describe()
    assert "failed (NcclError)" in result.stderr, result.describe()
