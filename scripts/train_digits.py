"""Data-parallel training of a small MLP on scikit-learn's digits under MultiWorkerMirroredStrategy.

The project's main job, and a template for porting a ``tf.distribute`` training loop:

    mpiexec -n 4 .venv/bin/python -m mwms_mpi.run scripts/train_digits.py
    mpiexec -n 4 .venv/bin/python -m mwms_mpi.run scripts/train_digits.py --resume \
        --checkpoint-dir checkpoints/digits-20260101-120000-4242

The global batch is split over every replica of every worker by
``experimental_distribute_dataset``; each replica computes its gradients with the loss scaled by
the *global* batch size (TF's ``compute_average_loss``), so the optimizer's sum over replicas is
the full batch's gradient, and N workers train exactly like one on the same global batches.
The chief prints a progress bar and per-epoch loss and accuracy.

Checkpoints: a ``CheckpointManager`` saves every epoch into ``--checkpoint-dir`` (by default a
new directory per run, printed at the start). Each step runs through a
``PreemptionCheckpointHandler``: when any worker gets SIGTERM (Slurm's time limit, ``scancel``,
``sbatch --signal``), every worker saves the same step and the job exits with code 42; run it
again with ``--resume`` and the same directory, and it continues from that step (epoch, step in
the epoch, and the data order of that epoch are restored), ending with the weights an
uninterrupted run would have. ``--resume`` on a directory without a checkpoint is an error
(``--resume=auto`` starts from scratch then), a directory holding a checkpoint is never reused
without ``--resume``, a ``checkpoint`` state file that names no checkpoint it can restore stops
every mode (a new run would overwrite it), and resuming with other model or optimizer options
names the difference.

``--device gpu`` trains on CuPy arrays: the weights live on each replica's GPU (the rank's,
by node-local rank), the strategy fetches every batch there, and the arithmetic below runs in
CuPy (the same code, written against the arrays' module). ``--device cpu`` (the default) keeps
the strategy on the CPU even where a GPU is visible.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

import mwms_mpi
from mwms_mpi import data, distribute, metrics, optimizers, train
from mwms_mpi._lifecycle import agreed_exit  # ends every rank with a code all of them chose
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver

LAYERS = (64, 64, 10)  # 8x8 pixels -> hidden -> 10 digits
RESTART_CODE = 42  # the exit code after a preemption save: TF's default


def digits_pixels_and_labels() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (no download): ``load_digits(return_X_y=True)``'s arrays.

    Read from scikit-learn's own ``digits.csv.gz`` as ``load_digits`` reads it, without importing
    scikit-learn: that import (SciPy's with it) took 1.2 s of every rank's start, more than a
    short run's training. Where the file is not where scikit-learn keeps it, ``load_digits``.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    if spec is not None and spec.origin is not None:
        csv = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
        if csv.is_file():
            table = np.loadtxt(csv, delimiter=",")
            return table[:, :-1], table[:, -1].astype(int)
    from sklearn.datasets import load_digits as sklearn_digits

    x, y = sklearn_digits(return_X_y=True)
    return x, y


def load_digits(dtype: Any, seed: int) -> tuple[np.ndarray, ...]:
    """scikit-learn's bundled digits, shuffled once by ``seed``, 1500/297 split."""
    x, y = digits_pixels_and_labels()
    order = np.random.default_rng(seed).permutation(len(x))
    x = (x[order] / 16.0).astype(dtype)
    y = y[order].astype(np.int32)
    return x[:1500], y[:1500], x[1500:], y[1500:]


def array_module(device: str) -> Any:
    """numpy, or CuPy for ``--device gpu`` (imported only then)."""
    if device == "gpu":
        import cupy

        return cupy
    return np


def initial_weights(dtype: Any, seed: int) -> dict[str, np.ndarray]:
    """He-initialised weights; only the chief's values matter (creation broadcasts them)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(LAYERS)):
        weights[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype(
            dtype
        )
        weights[f"b{i}"] = np.zeros(fan_out, dtype=dtype)
    return weights


def forward_backward(
    params: dict[str, Any], x: Any, y: Any, global_batch: int, xp: Any = np
) -> tuple[Any, Any, dict[str, Any]]:
    """Loss summed over the batch / ``global_batch``, the number correct, and the gradients.

    ``xp`` is the arrays' module: numpy, or CuPy for arrays on a GPU.
    """
    h = xp.maximum(x @ params["w0"] + params["b0"], 0)
    logits = h @ params["w1"] + params["b1"]
    shifted = logits - logits.max(axis=1, keepdims=True) if len(x) else logits
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    rows = xp.arange(len(y))
    loss = -log_probs[rows, y].sum() / global_batch
    if xp is np:
        correct = np.int64((logits.argmax(axis=1) == y).sum()) if len(x) else np.int64(0)
    else:  # a count on the GPU, reduced there
        correct = (logits.argmax(axis=1) == y).sum(dtype=xp.int64)
    d_logits = xp.exp(log_probs)
    d_logits[rows, y] -= 1
    d_logits /= global_batch
    d_h = (d_logits @ params["w1"].T) * (h > 0)
    grads = {
        "w1": h.T @ d_logits,
        "b1": d_logits.sum(axis=0),
        "w0": x.T @ d_h,
        "b0": d_h.sum(axis=0),
    }
    return loss, correct, grads


def _at_least(least: int) -> Any:
    """An argparse type: an integer >= ``least`` (``--epochs -1`` is an error, not 0 epochs)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is not >= {least}")
        return value

    parse.__name__ = f"integer >= {least}"  # argparse names the type in its message
    return parse


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not > 0")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=_at_least(0), default=20)
    parser.add_argument("--global-batch", type=_at_least(1), default=64)
    parser.add_argument("--learning-rate", type=_positive_float, default=0.1)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--replicas-per-worker",
        type=_at_least(1),
        default=1,
        help="replicas per MPI rank: CPU replicas (tests multi-replica code without GPUs), or "
        "with --device gpu, GPUs (wrapping around the visible ones)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="train on numpy arrays (cpu, the strategy kept on the CPU) or CuPy arrays on each "
        "replica's GPU (gpu; needs CuPy)",
    )
    in_experiment = os.environ.get(EXPERIMENT_DIR_ENV) or None
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=in_experiment,
        help=f"where checkpoints go (default: ${EXPERIMENT_DIR_ENV}, which "
        "scripts/slurm/run.sbatch sets per experiment; else a new directory for each run, "
        "checkpoints/digits-<UTC date>-<time>-<pid> under the current directory; the run "
        "prints it). Use the same one to resume.",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="yes",
        choices=("yes", "auto"),
        default="auto" if in_experiment else None,
        help="continue from the latest checkpoint in --checkpoint-dir (an error if there is "
        "none); --resume=auto: continue if there is one, else start from scratch (the "
        f"default when ${EXPERIMENT_DIR_ENV} is set: every job of an experiment continues it)",
    )
    parser.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="write every replica's weights after every step to DUMP.rank<r>.npz",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="exact-then-rounded reductions (config.experimental.enable_op_determinism): with "
        "workers x replicas-per-worker fixed, the same weights, bit for bit, at any world size",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (there is none unless stdout is a terminal)",
    )
    parser.add_argument(
        "--elastic",
        action="store_true",
        help="survive a lost rank (Open MPI with ULFM: mpiexec --with-ft ulfm ... python -m "
        "mwms_mpi.run --elastic): each step runs under ElasticHandler, and the survivors go "
        "on from the last step completed everywhere (docs/elastic.md); SIGTERM on every "
        "rank saves and exits 42 at the next step, on some ranks they leave as lost ones",
    )
    parser.add_argument(
        "--drill-kill",
        type=_drill,
        default=None,
        metavar="RANK:STEP[:HOW]",
        help="a rehearsal of a lost machine: MPI rank RANK fails before global step STEP "
        "(counted from the first epoch), HOW: kill (SIGKILL, the default), stop (SIGSTOP: a "
        "frozen rank, found by the launcher's failure detector) or raise (an uncaught "
        "exception)",
    )
    return parser.parse_args(argv)


def _world_rank() -> int:
    """This process's MPI rank (``COMM_WORLD``'s: a shrink renumbers the workers, not it)."""
    from mpi4py import MPI  # initialised by the strategy by now

    return int(MPI.COMM_WORLD.Get_rank())


DRILLS = ("kill", "stop", "raise")


def _drill(text: str) -> tuple[int, int, str]:
    parts = text.split(":")
    how = parts.pop() if len(parts) == 3 else "kill"
    try:
        rank, step = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:STEP[:HOW], got {text!r}") from None
    if how not in DRILLS:
        raise argparse.ArgumentTypeError(f"HOW must be one of {', '.join(DRILLS)}, got {how!r}")
    return rank, step, how


def _fail(how: str) -> None:
    """The drill's failure of this rank."""
    if how == "raise":
        raise RuntimeError(f"drill: rank {_world_rank()} raises")
    os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)


# The experiment's checkpoint directory, as scripts/slurm/run.sbatch exports it.
EXPERIMENT_DIR_ENV = "MWMS_CHECKPOINT_DIR"

# Options that decide the model, the optimizer and the data order: a checkpoint resumes only
# under the same ones (the number of workers and replicas may change).
MODEL_OPTIONS = ("optimizer", "dtype", "learning_rate", "global_batch", "seed")
CONFIG_FILE = "train_digits.json"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.deterministic:
        mwms_mpi.config.experimental.enable_op_determinism()
    dtype = np.dtype(args.dtype)
    xp = array_module(args.device)
    kind = "GPU" if args.device == "gpu" else "CPU"
    resolver = MPIClusterResolver(num_accelerators={kind: args.replicas_per_worker})
    strategy = distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    config = {"layers": list(LAYERS), **{k: getattr(args, k) for k in MODEL_OPTIONS}}
    x_train, y_train, x_test, y_test = load_digits(dtype, args.seed)
    initial = {k: xp.asarray(v) for k, v in initial_weights(dtype, args.seed).items()}

    def forward_backward_step(values: dict[str, Any], x: Any, y: Any) -> Any:
        return forward_backward(values, x, y, args.global_batch, xp)

    def accuracy(params: dict[str, Any], names: list[str]) -> float:
        return _accuracy(params, names, x_test, y_test)

    job = Job(args, strategy, config, initial, (x_train, y_train))
    return job.train(forward_backward_step, accuracy, loss_format=".4f")


class Job:
    """One training run of a digits model, whatever computes its passes (this script's numpy
    MLP, or ``train_digits_cnn.py``'s JAX CNN): the variables, optimizer, epoch metrics and
    checkpoint made in the scope, resuming, preemption (``PreemptionCheckpointHandler``, exit
    42), the epoch loop over the distributed dataset, the printout and ``--dump``.

    Args:
      args: the parsed options (``parse_args``).
      strategy: the ``MultiWorkerMirroredStrategy``.
      config: the model options a checkpoint resumes only under (``train_digits.json``).
      initial: each variable's initial value, by name.
      train_data: ``(x_train, y_train)``.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        strategy: Any,
        config: dict[str, Any],
        initial: dict[str, Any],
        train_data: tuple[np.ndarray, np.ndarray],
    ) -> None:
        self.args, self.strategy, self.train_data = args, strategy, train_data
        self.directory = args.checkpoint_dir or _new_checkpoint_dir(strategy)
        self.resuming = _check_resume(strategy, args, self.directory, config)
        with strategy.scope():
            self.params = {k: mwms_mpi.Variable(v, name=k) for k, v in initial.items()}
            self.optimizer: optimizers.Optimizer = (
                optimizers.SGD(args.learning_rate, momentum=0.9)
                if args.optimizer == "sgd"
                else optimizers.Adam(args.learning_rate)
            )
            self.optimizer.build(list(self.params.values()))
            self.epoch = mwms_mpi.Variable(np.int64(0), trainable=False, name="epoch")
            self.step_in_epoch = mwms_mpi.Variable(
                np.int64(0), trainable=False, name="step_in_epoch"
            )
            # The epoch's running sums, on every replica (SyncOnRead): checkpointed with the
            # model, so an epoch resumed in its middle reports what the uninterrupted one does.
            self.epoch_loss = metrics.Sum(name="epoch_loss", dtype=np.dtype(args.dtype).name)
            self.epoch_correct = metrics.Sum(name="epoch_correct", dtype=np.dtype(args.dtype).name)
            checkpoint = train.Checkpoint(
                params=self.params,
                optimizer=self.optimizer,
                epoch=self.epoch,
                step_in_epoch=self.step_in_epoch,
                epoch_loss=self.epoch_loss,
                epoch_correct=self.epoch_correct,
            )
            self.manager = train.CheckpointManager(checkpoint, self.directory, max_to_keep=3)
            if self.chief and not self.resuming:
                _write_config(self.directory, config)
            self.elastic: Any = None
            self.handler: Any = None
            if args.elastic:  # restores the latest checkpoint, if any; survives a lost rank
                self.manager.restore_or_initialize()
                self.elastic = distribute.experimental.ElasticHandler(strategy, self.manager)
            else:  # restores the latest checkpoint, if any; saves and exits on SIGTERM
                self.handler = distribute.experimental.PreemptionCheckpointHandler(
                    strategy.cluster_resolver,
                    self.manager,
                    termination_config=distribute.experimental.TerminationConfig(
                        exit_fn=self._exit_after_preemption
                    ),
                )

    @property
    def chief(self) -> bool:
        """Whether this worker prints and writes for the job: it moves to the lowest
        surviving rank when ``--elastic`` goes on without a lost one."""
        return bool(self.strategy.extended.should_checkpoint)

    def _where(self) -> str:
        return f"epoch {int(self.epoch.numpy())}, step {int(self.step_in_epoch.numpy())}"

    def _exit_after_preemption(self) -> None:
        if self.chief:
            print(
                f"preempted: saved {self.manager.latest_checkpoint} at {self._where()}; run "
                f"again with --resume --checkpoint-dir {self.directory} to continue",
                flush=True,
            )
        sys.exit(RESTART_CODE)

    def train(self, forward_backward: Any, accuracy: Any, loss_format: str) -> int:
        """Trains for ``args.epochs``: ``forward_backward(values, x, y)`` gives a replica's
        ``(loss, correct, grads)`` from its weights (read without a copy), ``accuracy(params,
        names)`` the test accuracy; the loss is printed with ``loss_format``."""
        args, strategy, params = self.args, self.strategy, self.params
        if self.chief:
            print(f"checkpoints: {self.directory}", flush=True)
            if self.resuming:
                latest = self.manager.latest_checkpoint
                print(f"resumed from {latest} at {self._where()}", flush=True)
            elif args.resume:
                print(f"no checkpoint in {self.directory}: starting from scratch", flush=True)
        names = sorted(params)

        def step(x: Any, y: Any) -> None:
            # this replica's weights, read without a copy (read-only, copy-on-write)
            values = {k: params[k].read_only_value() for k in names}
            loss, correct, grads = forward_backward(values, x, y)
            self.optimizer.apply_gradients([(grads[k], params[k]) for k in names])
            self.epoch_loss.update_state(loss)  # this replica's share; summed when read
            self.epoch_correct.update_state(correct)

        def distributed_step(x: Any, y: Any) -> None:
            strategy.run(step, args=(x, y))

        def elastic_step(batch: Any) -> None:  # the step counter is part of the transaction
            drill = args.drill_kill
            here = int(epoch.numpy()) * steps_per_epoch + int(step_in_epoch.numpy())
            if drill is not None and drill[:2] == (_world_rank(), here):
                _fail(drill[2])
            distributed_step(*batch)
            step_in_epoch.assign_add(np.int64(1))

        def read_metrics() -> tuple[float, float]:  # the epoch's loss sum and correct count
            return float(self.epoch_loss.result()), float(self.epoch_correct.result())

        x_train, y_train = self.train_data
        dumps: list[np.ndarray] = []
        steps_per_epoch = -(-len(x_train) // args.global_batch)
        epoch, step_in_epoch = self.epoch, self.step_in_epoch
        try:  # the weights so far are written even when a preemption ends the run
            while int(epoch.numpy()) < args.epochs:
                first = int(step_in_epoch.numpy())  # > 0 when resuming in the middle of an epoch
                shown = self.chief and not args.quiet
                progress = _progress(shown, steps_per_epoch, int(epoch.numpy()))
                if progress is not None:
                    progress.update(first)
                batches = _epoch_batches(x_train, y_train, args, int(epoch.numpy())).skip(first)
                iterator = iter(strategy.experimental_distribute_dataset(batches))
                while True:
                    try:
                        if self.elastic is not None:
                            self.elastic.run(elastic_step, iterator)
                        else:
                            self.handler.run(distributed_step, *next(iterator))
                            step_in_epoch.assign_add(np.int64(1))
                    except StopIteration:
                        break
                    if args.dump is not None:
                        dumps.append(_all_replica_weights(strategy, params, names))
                    if progress is not None:
                        progress.update(1)
                if progress is not None:
                    progress.close()
                # every worker reads the metrics (a collective), then the next epoch starts at 0
                if self.elastic is not None:  # a rank lost here is survived too
                    loss_sum, correct = self.elastic.call(read_metrics)
                else:
                    loss_sum, correct = read_metrics()
                loss, train_accuracy = loss_sum / steps_per_epoch, correct / len(x_train)
                self.epoch_loss.reset_state()
                self.epoch_correct.reset_state()
                epoch.assign_add(np.int64(1))
                step_in_epoch.assign(np.int64(0))
                if self.elastic is not None:
                    self.elastic.save()
                else:
                    self.manager.save()
                if self.chief:
                    print(
                        f"epoch {int(epoch.numpy())}: loss {loss:{loss_format}} "
                        f"train accuracy {train_accuracy:.3f} "
                        f"test accuracy {accuracy(params, names):.3f}",
                        flush=True,
                    )
        finally:
            if args.dump is not None:
                rank = strategy.cluster_resolver.task_id if strategy.cluster_resolver else 0
                np.save(f"{args.dump}.rank{rank}.npy", np.stack(dumps) if dumps else np.empty(0))
        if self.chief:
            print(f"final test accuracy {accuracy(params, names):.3f}", flush=True)
        return 0


def _epoch_batches(x: np.ndarray, y: np.ndarray, args: argparse.Namespace, epoch: int) -> Any:
    """Epoch ``epoch``'s global batches: its order depends on the seed and the epoch alone, so
    a resumed run (a new process) sees the batches an uninterrupted run would."""
    seed = args.seed * 100_003 + epoch
    return (
        data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=seed, reshuffle_each_iteration=False)
        .batch(args.global_batch)
    )


def _replica_sum(strategy: Any, value_fn: Any) -> Any:
    """The sum over every replica of every worker of ``value_fn(ValueContext)``: what every
    worker then decides on is the same everywhere."""
    values = strategy.experimental_distribute_values_from_function(value_fn)
    return strategy.reduce(distribute.ReduceOp.SUM, values, axis=None)


def _new_checkpoint_dir(strategy: Any) -> Path:
    """``checkpoints/digits-<UTC time>-<pid>`` of the chief's first replica, on every worker."""

    def chief_stamp(context: Any) -> np.ndarray:
        if context.replica_id_in_sync_group != 0:
            return np.zeros(2, dtype=np.int64)
        return np.array([int(time.time()), os.getpid()], dtype=np.int64)

    stamp, pid = (int(v) for v in _replica_sum(strategy, chief_stamp))
    return (
        Path("checkpoints") / f"digits-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(stamp))}-{pid}"
    )


def _check_resume(
    strategy: Any, args: argparse.Namespace, directory: Path, config: dict[str, Any]
) -> bool:
    """Whether to resume from ``directory``; stops every worker when that cannot be right.

    Every decision rests on sums over all replicas, so every worker takes the same one.
    """
    replicas = strategy.num_replicas_in_sync
    state_file = directory / "checkpoint"  # what latest_checkpoint reads
    try:
        found = train.latest_checkpoint(str(directory))
        why = "it cannot be parsed (a warning above says why), or the checkpoint it names is gone"
    except ValueError as exc:  # it parses but names no latest checkpoint: TF's ValueError
        found, why = None, str(exc)
    seen = int(_replica_sum(strategy, lambda _: np.int64(found is not None)))
    if 0 < seen < replicas:
        _stop(
            strategy,
            f"only some workers see a checkpoint in {directory}: it must be on a "
            "file system that every worker shares",
        )
    # latest_checkpoint ignores a state file it cannot use, as TF's does; training from scratch
    # would then overwrite it (and --resume=auto would silently start over), so every mode stops.
    unusable = found is None and os.path.lexists(state_file)
    if int(_replica_sum(strategy, lambda _: np.int64(unusable))):
        _stop(
            strategy,
            f"the checkpoint state file {state_file} names no checkpoint that can be restored: "
            f"{why if unusable else 'another worker cannot use it'}. Repair or remove it, or "
            "choose another --checkpoint-dir",
        )
    if seen and not args.resume:
        _stop(
            strategy,
            f"{directory} already holds the checkpoint {found}: pass --resume to "
            "continue it, or choose another --checkpoint-dir",
        )
    if not seen and args.resume == "yes" and args.checkpoint_dir is None:
        _stop(
            strategy,
            "--resume needs the --checkpoint-dir to resume from (by default each run "
            "gets a new one)",
        )
    if not seen and args.resume == "yes":
        _stop(
            strategy,
            f"--resume: there is no checkpoint in {directory} (--resume=auto "
            "starts from scratch when there is none)",
        )
    problems = _config_differences(directory, config) if seen else []
    if int(_replica_sum(strategy, lambda _: np.int64(bool(problems)))):
        _stop(
            strategy,
            f"the checkpoint in {directory} is of another model or optimizer: "
            + "; ".join(problems or ["the workers read different settings"])
            + ". Use the same options to resume, or another --checkpoint-dir.",
        )
    return bool(seen)


def _config_differences(directory: Path, config: dict[str, Any]) -> list[str]:
    """What differs between ``config`` and the options the checkpoint was made with."""
    try:
        saved = json.loads((directory / CONFIG_FILE).read_text())
    except FileNotFoundError:
        return []  # made by an older version of this script: the restore checks shapes
    except (OSError, ValueError) as exc:
        return [f"{directory / CONFIG_FILE} cannot be read ({exc})"]
    return [
        f"it was trained with {_option(key)} {saved.get(key)!r}, this run asks for {value!r}"
        for key, value in config.items()
        if saved.get(key) != value
    ]


def _option(key: str) -> str:
    return "LAYERS" if key == "layers" else "--" + key.replace("_", "-")


def _write_config(directory: Path, config: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{CONFIG_FILE}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(config, indent=1) + "\n")
    os.replace(tmp, directory / CONFIG_FILE)


def _stop(strategy: Any, message: str) -> NoReturn:
    """Every worker stops with exit code 2 (the chief says why): a decision all of them took."""
    if strategy.extended.should_checkpoint:
        print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr, flush=True)
    agreed_exit(2)


def _all_replica_weights(strategy: Any, params: dict[str, Any], names: list[str]) -> np.ndarray:
    """Every local replica's copy of every weight, flattened: one row per replica."""
    rows = []
    for r in range(len(strategy.experimental_local_results(params[names[0]]))):
        parts = [
            np.asarray(strategy.experimental_local_results(params[k])[r]).ravel() for k in names
        ]
        rows.append(np.concatenate(parts))
    return np.stack(rows)


def _accuracy(params: dict[str, Any], names: list[str], x: np.ndarray, y: np.ndarray) -> float:
    values = {k: np.asarray(params[k].numpy()) for k in names}
    h = np.maximum(x @ values["w0"] + values["b0"], 0)
    return float(((h @ values["w1"] + values["b1"]).argmax(axis=1) == y).mean())


def _progress(show: bool, total: int, epoch: int) -> Any:
    """A progress bar on the chief, only on a terminal: piped into a file or a batch job's
    output, a bar's redraws are debris (as users of tqdm expect, it stays off there)."""
    if not show or not sys.stdout.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch + 1}", leave=False, file=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
