"""A preempted and resumed job trains like the serial numpy anchor, not only like mwms_mpi at N = 1.

tests/e2e/test_preemption.py compares the interrupted and the resumed runs with a 1-rank
uninterrupted mwms_mpi run; an optimizer defect that does not depend on the world size or on
the resume is in that reference too and passes. Here the same preemption (SIGTERM to rank 1 of 2
during step 31 of 48: every rank saves after step 32 and exits 42; ``--resume`` runs steps 33 to
48) is compared step by step with ``tests/support/serial_training.py``, which imports nothing
from mwms_mpi. Adam: its resume needs the most state (the step counter its bias correction
reads, and both moments). Serial test: this process never imports ``mpi4py.MPI``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_preemption import (
    ARGS,
    JOB_TIMEOUT_S,
    PREEMPT,
    STEPS,
    _argv,
    _assert_preempted,
    _dumps,
)
from tests.support import serial_training
from tests.support.launch import run_mpi, write_script

pytestmark = pytest.mark.timeout(240)

LEARNING_RATE = float(ARGS[ARGS.index("--learning-rate") + 1])
DTYPE = ARGS[ARGS.index("--dtype") + 1]


def test_preempted_then_resumed_adam_matches_the_serial_anchor(tmp_path: Path) -> None:
    want = serial_training.train("adam", LEARNING_RATE, DTYPE, STEPS).weights
    wrapper = write_script(tmp_path, "preempt.py", PREEMPT)
    directory, first_dump, resumed_dump = (
        tmp_path / "ckpt",
        tmp_path / "first",
        tmp_path / "resumed",
    )
    plan = {"sigterm": {"at": 30, "ranks": [1]}}
    first = run_mpi(
        2,
        _argv(wrapper, directory, first_dump, "adam"),
        timeout=JOB_TIMEOUT_S,
        env={"PREEMPT_PLAN": json.dumps(plan)},
    )
    runs = _assert_preempted(first, 2)
    assert runs == 32, first.describe()
    resumed = run_mpi(
        2,
        _argv(wrapper, directory, resumed_dump, "adam", "--resume"),
        timeout=JOB_TIMEOUT_S,
        env={"PREEMPT_PLAN": "{}"},
    )
    assert resumed.returncode == 0, resumed.describe()
    assert "at epoch 1, step 8" in resumed.stdout, resumed.describe()
    for rank, (before, after) in enumerate(
        zip(_dumps(first_dump, 2), _dumps(resumed_dump, 2), strict=True)
    ):
        assert before.shape[:2] == (runs, 1) and after.shape[:2] == (STEPS - runs, 1), rank
        serial_training.assert_close_to_anchor(
            np.concatenate([before[:, 0], after[:, 0]]),
            want,
            f"rank {rank}, preempted after step {runs} and resumed",
            serial_training.TOLERANCE,
        )
