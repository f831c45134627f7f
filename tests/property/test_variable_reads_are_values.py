"""Property: what a variable hands out is a value (docs/architecture.md, "Results are values").

Hypothesis draws a program over a mirrored variable and its optimizer (SGD with momentum,
Adam with and without AMSGrad, RMSprop, Adagrad) on one or two replicas, reading and assigning
that variable or a sync-on-read one (SUM or MEAN): updates (``assign``, ``assign_add``,
``assign_sub``, ``scatter_update``, ``scatter_add``; a sync-on-read variable's in
``strategy.run``, each replica its own; ``apply_gradients`` in ``strategy.run``, restoring a
checkpoint) between reads of every kind (``read_value``, ``value``, ``numpy``, ``np.asarray``,
``read_only_value`` of the variable, of each replica's copy and of the optimizer's slots, a
read in ``strategy.run``, ``strategy.reduce`` of it). The program keeps every read, or only
numpy views of it, and every array it passed in. At the end:

- each kept read, and each view of one, still holds what it held when it was read (a copy
  taken then), and no input array changed: the in-place updates (``_update_with``, Adam's
  moments) never write what was handed out or handed in;
- the variable and every slot end with the same bits as the same program without its reads:
  the copy-on-write that a read triggers changes where an update writes, never what.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, NamedTuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import mwms_mpi
from mwms_mpi import distribute, optimizers, train
from mwms_mpi.values.indexed_slices import IndexedSlices
from tests.support.results import VIEWS

SHAPE = (3, 2)
UPDATES = (
    "assign",
    "assign_add",
    "assign_sub",
    "scatter_update",
    "scatter_add",
    "apply",
    "restore",
)
READS = (
    "read_value",
    "value",
    "numpy",
    "asarray",
    "read_only_value",
    "copy_read_only_value",
    "copy_numpy",
    "slot_read_only_value",
    "run_read_value",
    "reduce",
)
# The variable read and assigned: a mirrored one (the optimizer's), or a sync-on-read one.
KINDS = ("mirrored", "sum", "mean")
OPTIMIZERS = {
    "sgd": lambda: optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: optimizers.Adam(0.1),
    "amsgrad": lambda: optimizers.Adam(0.1, amsgrad=True),
    "rmsprop": lambda: optimizers.RMSprop(0.1, momentum=0.5, centered=True),
    "adagrad": lambda: optimizers.Adagrad(0.1),
}


class Step(NamedTuple):
    """One call: an update or a read; ``seed`` makes its input, ``views`` what is kept."""

    name: str
    seed: int
    views: tuple[str, ...]


steps = st.builds(
    Step,
    st.sampled_from(UPDATES + READS + READS),
    st.integers(0, 2**16),
    st.lists(st.sampled_from(tuple(VIEWS)), min_size=1, max_size=2, unique=True).map(tuple),
)


def _input(seed: int, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """Small integers over 4: every sum and product below is exact in float32."""
    return (np.random.default_rng(seed).integers(-8, 9, shape) / 4).astype(np.float32)


class Program:
    """Runs the steps on fresh variables; keeps reads and inputs when ``keep`` is true."""

    def __init__(
        self, replicas: int, kind: str, optimizer: str, keep: bool, directory: Path
    ) -> None:
        devices = None if replicas == 1 else [f"/cpu:{i}" for i in range(replicas)]
        self.strategy = distribute.MirroredStrategy(devices)
        with self.strategy.scope():
            self.weights = mwms_mpi.Variable(_input(1), name="w")
            self.opt = OPTIMIZERS[optimizer]()
            self.opt.build([self.weights])
            self.var = self.weights  # the variable read and assigned
            if kind != "mirrored":
                self.var = mwms_mpi.Variable(
                    _input(2),
                    name="stat",
                    synchronization=mwms_mpi.VariableSynchronization.ON_READ,
                    aggregation=getattr(mwms_mpi.VariableAggregation, kind.upper()),
                )
        self.checkpoint = train.Checkpoint(var=self.var, weights=self.weights, opt=self.opt)
        self.saved = str(self.checkpoint.write(str(directory / "ckpt")))
        self.keep = keep
        self.kept: list[tuple[str, np.ndarray, bytes]] = []  # (label, array, its bytes then)

    def _hold(self, label: str, array: Any, views: tuple[str, ...]) -> None:
        if not self.keep:
            return
        array = np.asarray(array)
        for view in views:
            held = VIEWS[view](array)
            self.kept.append((f"{label} kept as {view}", held, held.tobytes()))

    def _given(self, label: str, array: np.ndarray) -> np.ndarray:
        self._hold(f"the input of {label}", array, ("whole",))
        return array

    def update(self, step: Step) -> None:
        s, var = self.strategy, self.var
        label = f"{step.name} #{step.seed}"
        copies = s.experimental_local_results(var)
        if var is not self.weights and step.name not in ("apply", "restore"):
            # a sync-on-read variable: its copies are updated in replica context (TF refuses
            # cross-replica assign_add of a SUM), each replica with its own value
            deltas = [self._given(label, _input(step.seed + r)) for r in range(len(copies))]
            op = "assign" if step.name in ("assign", "scatter_update") else "assign_add"

            def replica_update() -> None:
                ctx = distribute.get_replica_context()
                getattr(var, op)(deltas[ctx.replica_id_in_sync_group])

            s.run(replica_update)
        elif step.name in ("assign", "assign_add", "assign_sub"):
            getattr(var, step.name)(self._given(label, _input(step.seed)))
        elif step.name.startswith("scatter_"):
            rows = self._given(label, _input(step.seed, (2, SHAPE[1])))
            getattr(var, step.name)(IndexedSlices(rows, np.array([2, 0])))
        elif step.name == "apply":
            grads = [self._given(label, _input(step.seed + r)) for r in range(len(copies))]

            def replica_step() -> None:
                ctx = distribute.get_replica_context()
                self.opt.apply_gradients([(grads[ctx.replica_id_in_sync_group], self.weights)])

            s.run(replica_step)
        else:  # restore the checkpoint written at the start
            self.checkpoint.read(self.saved).assert_consumed()

    def read(self, step: Step) -> None:
        s, var, views = self.strategy, self.var, step.views
        label = f"{step.name} #{step.seed}"
        copies = s.experimental_local_results(var)
        pick = step.seed % len(copies)
        if step.name == "read_value":
            self._hold(label, var.read_value(), views)
        elif step.name == "value":
            self._hold(label, var.value(), views)
        elif step.name == "numpy":
            self._hold(label, var.numpy(), views)
        elif step.name == "asarray":
            self._hold(label, np.asarray(var), views)
        elif step.name == "read_only_value":
            self._hold(label, var.read_only_value(), views)
        elif step.name == "copy_read_only_value":
            self._hold(label, copies[pick].read_only_value(), views)
        elif step.name == "copy_numpy":
            self._hold(label, copies[pick].numpy(), views)
        elif step.name == "slot_read_only_value":
            slots = self.opt.variables[1:]  # the iteration count, then the slots
            slot = slots[step.seed % len(slots)]
            for i, copy in enumerate(s.experimental_local_results(slot)):
                self._hold(f"{label} ({slot.name}, copy {i})", copy.read_only_value(), views)
        elif step.name == "run_read_value":
            per_replica = s.run(lambda: var.read_value())
            for i, value in enumerate(s.experimental_local_results(per_replica)):
                self._hold(f"{label} (replica {i})", value, views)
        else:  # reduce
            per_replica = s.run(lambda: var.read_value())
            self._hold(label, s.reduce("SUM", per_replica, axis=None), views)

    def final_bytes(self) -> list[bytes]:
        return [
            np.asarray(copy.numpy()).tobytes()
            for v in (self.var, self.weights, *self.opt.variables)
            for copy in self.strategy.experimental_local_results(v)
        ]


@settings(max_examples=60)
@given(
    st.sampled_from((1, 2)),
    st.sampled_from(KINDS),
    st.sampled_from(sorted(OPTIMIZERS)),
    st.lists(steps, min_size=1, max_size=14),
)
def test_every_kept_read_and_input_keeps_its_value(
    replicas: int, kind: str, optimizer: str, program: list[Step]
) -> None:
    with TemporaryDirectory() as directory:
        runs = {}
        for keep in (True, False):
            run = Program(replicas, kind, optimizer, keep, Path(directory) / str(keep))
            for step in program:
                if step.name in UPDATES:
                    run.update(step)
                elif keep:  # the other run makes no read at all
                    run.read(step)
            runs[keep] = run
    changed = [label for label, held, then in runs[True].kept if held.tobytes() != then]
    assert not changed, f"changed after it was handed out or in: {changed}"
    assert runs[True].final_bytes() == runs[False].final_bytes(), "the reads changed an update"
