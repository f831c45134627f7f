"""The demos read scikit-learn's digits without importing scikit-learn (1.2 s of every rank's
start): the arrays must be ``load_digits``'s own, bit for bit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.launch import REPO_ROOT
from tests.support.scripts import load_script

pytest.importorskip("sklearn", reason="the demos' data needs the [examples] extra (scikit-learn)")


def test_the_digits_are_load_digits_own_arrays() -> None:
    from sklearn.datasets import load_digits

    want_x, want_y = load_digits(return_X_y=True)
    got_x, got_y = load_script("train_digits").digits_pixels_and_labels()
    for got, want in ((got_x, want_x), (got_y, want_y)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_reading_the_digits_does_not_import_sklearn() -> None:
    script = str(REPO_ROOT / "scripts/train_digits.py")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('td', {script!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "x, y = module.digits_pixels_and_labels()\n"
        "assert x.shape == (1797, 64), x.shape\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
