"""examples/torch_digits.py (a PyTorch model through mwms_mpi) trains alike at 1 and 2 workers.

Runs where PyTorch is installed; elsewhere it is skipped, saying so (torch is no dependency of
mwms_mpi or of its test extras: a CPU wheel is 190 MB).
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from tests.support.launch import REPO_ROOT, LaunchResult, run_mpi

pytest.importorskip(
    "torch",
    reason="PyTorch is not installed (not a dependency of mwms_mpi); to run this test: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu",
)
pytest.importorskip("sklearn", reason="the example needs the [examples] extra (scikit-learn)")

pytestmark = pytest.mark.timeout(300)

EXAMPLE = REPO_ROOT / "examples" / "torch_digits.py"


def _train(n: int) -> LaunchResult:
    argv = [sys.executable, "-m", "mwms_mpi.run", EXAMPLE, "--epochs", "2"]
    result = run_mpi(n, argv, timeout=180)
    assert result.returncode == 0, result.describe()
    return result


def _epochs(result: LaunchResult) -> list[tuple[float, float]]:
    found = re.findall(r"^epoch \d+: loss ([\d.]+) test accuracy ([\d.]+)$", result.stdout, re.M)
    return [(float(loss), float(accuracy)) for loss, accuracy in found]


def test_torch_example_trains_alike_at_one_and_two_workers() -> None:
    one, two = _epochs(_train(1)), _epochs(_train(2))
    assert len(one) == 2 and len(two) == 2, (one, two)  # only the chief prints
    np.testing.assert_allclose([e[0] for e in two], [e[0] for e in one], rtol=1e-3)
    assert two[1][0] < two[0][0]  # it learns
    assert two[1][1] >= 0.8
