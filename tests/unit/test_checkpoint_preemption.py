"""A resume through ``PreemptionCheckpointHandler`` restores the optimizer's state too.

Issue 23, item 4: the handler restores the latest checkpoint when it is made, which in a
restarted job is before the optimizer's first step; its slots and ``iterations`` were then
skipped, and the resumed weights differed from an uninterrupted run's. Here a job with Adam
gets SIGTERM, saves and exits (42); a new "process" (new variables, a new unbuilt optimizer, a
new handler) resumes and must end with the uninterrupted run's weights, bit for bit.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import _lifecycle, optimizers, train
from mwms_mpi.distribute.experimental import PreemptionCheckpointHandler

pytestmark = pytest.mark.timeout(60)
STEPS = 12


@pytest.fixture(autouse=True)
def sigterm_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SIGTERM's handler is restored after each test; the agreed exit code is forgotten."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    monkeypatch.setattr(_lifecycle, "_agreed_exit_code", None)
    yield
    signal.signal(signal.SIGTERM, previous)


class Job:
    """One run of the training program: a model, an optimizer and a handler, made anew."""

    def __init__(self, directory: Path, make: Any) -> None:
        self.w = mwms_mpi.Variable(np.linspace(-1.0, 1.0, 5).astype(np.float32))
        self.step = mwms_mpi.Variable(np.int64(0))
        self.optimizer = make()  # not built: its first step makes its slots
        checkpoint = train.Checkpoint(w=self.w, step=self.step, optimizer=self.optimizer)
        self.handler = PreemptionCheckpointHandler(None, checkpoint, str(directory))

    def train_step(self, sigterm_at: int | None) -> None:
        step = int(self.step.numpy())
        grad = (np.cos(np.arange(5.0) * (step + 1)) * (step + 1)).astype(np.float32)
        self.optimizer.apply_gradients([(grad * self.w.numpy(), self.w)])
        self.step.assign_add(np.int64(1))
        if step == sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)

    def train(self, sigterm_at: int | None = None) -> None:
        while int(self.step.numpy()) < STEPS:
            self.handler.run(self.train_step, sigterm_at)


@pytest.mark.parametrize(
    "make",
    [lambda: optimizers.Adam(0.05), lambda: optimizers.SGD(0.05, momentum=0.9, nesterov=True)],
    ids=["adam", "sgd-nesterov"],
)
def test_resume_through_the_handler_equals_the_uninterrupted_run(tmp_path: Path, make: Any) -> None:
    straight = Job(tmp_path / "straight", make)
    straight.train()

    first = Job(tmp_path / "preempted", make)
    with pytest.raises(SystemExit) as info:
        first.train(sigterm_at=4)
    assert info.value.code == 42
    saved_at = int(first.step.numpy())
    assert 0 < saved_at < STEPS

    resumed = Job(tmp_path / "preempted", make)  # restores in its constructor, before a step
    assert int(resumed.step.numpy()) == saved_at
    assert resumed.optimizer.iterations is None  # its slots do not exist yet
    resumed.train()
    assert int(resumed.optimizer.iterations.numpy()) == STEPS
    assert resumed.w.numpy().tobytes() == straight.w.numpy().tobytes()
