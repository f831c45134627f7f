"""The glue of ``tests/tf_parity``: a ported TF test file's scenarios, run under mwms_mpi and
compared with what TF 2.21 did, outcome by outcome.

Each ``test_<tf file>.py`` here holds the scenarios ported from one of TF 2.21's
``tensorflow/python/distribute/*_test.py`` files, in a ``SCENARIOS`` dict keyed by the TF test
method they come from (``"StrategyReduceTest.testReduceMeanAxisNone"``), and ends with::

    test_m2, test_mwms = parity_tests(SCENARIOS, __file__)

A scenario takes a backend (``tests/support/differential.py``: TF's or ours) and a strategy and
returns named outcomes; TF's outcomes are pinned in ``pins/<tf file>.json``, written by real TF
2.21 outside the repository's venv (TF is never a dependency of the project or its tests)::

    TF_CPP_MIN_LOG_LEVEL=3 <a venv with tensorflow-cpu==2.21.0 and pytest>/bin/python \\
        -m tests.support.differential --scenarios tests.tf_parity.test_values \\
        --configs mirrored_k2 mwms_n1_k1 mwms_n2_k1 mwms_n4_k1 \\
        --out tests/tf_parity/pins/test_values.json

The configurations (README.md): ``M2``, MirroredStrategy over two CPU replicas in one process
(``test_m2``, in the serial run), and MultiWorkerMirroredStrategy with one replica per worker at
the MPI run's world size, 1, 2 or 4 (``test_mwms``, marked ``mpi``: every rank compares its
outcomes with its worker's pins and the ranks agree on pass/fail before asserting).

This module imports neither pytest's plugins nor mwms_mpi at import time beyond what the test
functions need, so that TF's Python can import a scenario file to record its pins.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tests.support.differential import OursBackend, Scenarios, differences, pinned

CONFIGS = ("mirrored_k2", "mwms_n1_k1", "mwms_n2_k1", "mwms_n4_k1")


def pins_path(test_file: str) -> str:
    """``pins/<test file's stem>.json`` beside the scenario file."""
    stem = os.path.splitext(os.path.basename(test_file))[0]
    return os.path.join(os.path.dirname(os.path.abspath(test_file)), "pins", stem + ".json")


def _params(scenarios: Scenarios, failing: Mapping[str, str]) -> list[Any]:
    """One parameter per scenario; a known, open difference is a strict ``xfail`` naming it."""
    unknown = set(failing) - set(scenarios)
    assert not unknown, f"expected failures name no scenario: {sorted(unknown)}"
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=failing[name]))
        if name in failing
        else name
        for name in scenarios
    ]


def parity_tests(
    scenarios: Scenarios, test_file: str, failing: Mapping[str, str] | None = None
) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two test functions of a scenario file: M2 (serial) and MWMS (under MPI).

    Args:
      scenarios: the file's ``SCENARIOS``.
      test_file: the file's ``__file__`` (its pins are ``pins/<stem>.json``).
      failing: scenario -> why it differs from TF today (strict ``xfail``: it fails the run
        once it passes, so the entry must then go).
    """
    path = pins_path(test_file)
    params = _params(scenarios, failing or {})

    @pytest.mark.parametrize("scenario", params)
    def test_m2(m2_strategy: Any, scenario: str) -> None:
        ours = scenarios[scenario](OursBackend(), m2_strategy)
        found = differences(pinned("mirrored_k2", 0, path)[scenario], ours)
        assert not found, found

    @pytest.mark.mpi
    @pytest.mark.parametrize("scenario", params)
    def test_mwms(mwms_strategy: Any, parity_comm: Any, scenario: str) -> None:
        from tests.support.mpi import all_ranks_ok

        rank, size = parity_comm.Get_rank(), parity_comm.Get_size()
        tf = pinned(f"mwms_n{size}_k1", rank, path)[scenario]  # skips where TF did not run
        ours = scenarios[scenario](OursBackend(), mwms_strategy)
        found = differences(tf, ours)
        assert all_ranks_ok(parity_comm, not found), found

    return test_m2, test_mwms
