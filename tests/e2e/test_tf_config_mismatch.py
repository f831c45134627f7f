"""A TF_CONFIG that disagrees with the MPI ranks says so, names it, and says what to do.

The usual case: a TF job script exports one TF_CONFIG for every process, and the job is launched
with ``mpiexec``, where TF_CONFIG is not needed at all (issue 26, item 5).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.launch import run_python_mpi

pytestmark = pytest.mark.timeout(120)

PROGRAM = """\
from mwms_mpi import distribute
distribute.MultiWorkerMirroredStrategy()
print("built")
"""


def test_a_tf_config_naming_another_task_names_itself_and_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    tf_config = {
        "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
        "task": {"type": "worker", "index": 0},  # the same for both ranks
    }
    result = run_python_mpi(2, script, timeout=60, env={"TF_CONFIG": json.dumps(tf_config)})
    assert result.returncode != 0, result.describe()
    text = result.output
    assert "TF_CONFIG places this process at task worker:0" in text, result.describe()
    assert "but it is MPI rank 1 of 2" in text, result.describe()
    assert "Under mpiexec or srun TF_CONFIG is not needed" in text, result.describe()
    assert "unset TF_CONFIG" in text, result.describe()
