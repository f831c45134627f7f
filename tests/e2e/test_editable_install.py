"""mypy finds the editable install from a user's own script outside the repository (issue 13).

setuptools' default editable install is an import hook that mypy and IDEs cannot follow: a
user's ``import mwms_mpi`` then fails type checking with "Cannot find implementation or library
stub". ``make install`` (and the README's ``pip install``) therefore use
``--config-settings editable_mode=compat``, a ``.pth`` path entry that mypy reads. This test
runs the venv's mypy the way a user would: on a script in a directory of its own, no config,
no ``MYPYPATH``/``PYTHONPATH`` pointing at the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# mypy analyses numpy's stubs and the package from scratch: tens of seconds on 2 busy cores.
pytestmark = [pytest.mark.timeout(360), pytest.mark.mpi_neutral]

USER_SCRIPT = """\
import numpy as np

import mwms_mpi
from mwms_mpi import distribute

strategy = distribute.MultiWorkerMirroredStrategy()
replicas: int = strategy.num_replicas_in_sync
loss = mwms_mpi.nn.compute_average_loss(np.ones(4, np.float32), global_batch_size=8)
wrong: str = loss  # line 9: an ndarray is not a str
"""


def test_mypy_finds_the_installed_package_from_a_user_script(tmp_path: Path) -> None:
    mypy = Path(sys.executable).parent / "mypy"
    if not mypy.exists():
        pytest.skip(f"no mypy beside {sys.executable} (the [test] extra installs it)")
    script = tmp_path / "user_train.py"
    script.write_text(textwrap.dedent(USER_SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(
        [mypy, "--cache-dir", tmp_path / "mypy-cache", script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout + done.stderr
    assert "Cannot find implementation or library stub" not in out, out
    assert "import-not-found" not in out and "import-untyped" not in out, out
    # The package's own annotations reached mypy: the right use passes, the wrong one is named.
    assert f"{script.name}:9: error: Incompatible types in assignment" in out, out
    assert "Found 1 error in 1 file" in out and done.returncode == 1, out
