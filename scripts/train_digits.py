"""Data-parallel training of a small MLP on scikit-learn's digits under MultiWorkerMirroredStrategy.

The project's main job, and a template for porting a ``tf.distribute`` training loop:

    mpiexec -n 4 .venv/bin/python -m mwms_mpi.run scripts/train_digits.py
    mpiexec -n 4 .venv/bin/python -m mwms_mpi.run scripts/train_digits.py --resume

The global batch is split over every replica of every worker by
``experimental_distribute_dataset``; each replica computes its gradients with the loss scaled by
the *global* batch size (TF's ``compute_average_loss``), so the optimizer's sum over replicas is
the full batch's gradient, and N workers train exactly like one on the same global batches.
The chief prints a progress bar and per-epoch loss and accuracy; a ``CheckpointManager`` saves
every epoch and ``--resume`` continues from the latest checkpoint.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np

import mwms_mpi
from mwms_mpi import data, distribute, optimizers, train
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver

LAYERS = (64, 64, 10)  # 8x8 pixels -> hidden -> 10 digits


def load_digits(dtype: Any, seed: int) -> tuple[np.ndarray, ...]:
    """scikit-learn's bundled digits (no download), shuffled once by ``seed``, 1500/297 split."""
    from sklearn.datasets import load_digits as sklearn_digits

    x, y = sklearn_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x = (x[order] / 16.0).astype(dtype)
    y = y[order].astype(np.int32)
    return x[:1500], y[:1500], x[1500:], y[1500:]


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
    params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, global_batch: int
) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """Loss summed over the batch / ``global_batch``, the number correct, and the gradients."""
    h = np.maximum(x @ params["w0"] + params["b0"], 0)
    logits = h @ params["w1"] + params["b1"]
    shifted = logits - logits.max(axis=1, keepdims=True) if len(x) else logits
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    loss = -log_probs[rows, y].sum() / global_batch
    correct = np.int64((logits.argmax(axis=1) == y).sum()) if len(x) else np.int64(0)
    d_logits = np.exp(log_probs)
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--replicas-per-worker",
        type=int,
        default=1,
        help="CPU replicas per MPI rank (tests multi-replica code without GPUs)",
    )
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("/tmp/mwms_mpi_digits"))
    parser.add_argument("--resume", action="store_true", help="continue from the latest save")
    parser.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="write every replica's weights after every step to DUMP.rank<r>.npz",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dtype = np.dtype(args.dtype)
    resolver = (
        MPIClusterResolver(num_accelerators={"CPU": args.replicas_per_worker})
        if args.replicas_per_worker > 1
        else None
    )
    strategy = distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    chief = strategy.extended.should_checkpoint
    x_train, y_train, x_test, y_test = load_digits(dtype, args.seed)

    with strategy.scope():
        params = {
            k: mwms_mpi.Variable(v, name=k) for k, v in initial_weights(dtype, args.seed).items()
        }
        optimizer: optimizers.Optimizer = (
            optimizers.SGD(args.learning_rate, momentum=0.9)
            if args.optimizer == "sgd"
            else optimizers.Adam(args.learning_rate)
        )
        optimizer.build(list(params.values()))
        epoch = mwms_mpi.Variable(np.int64(0), trainable=False, name="epoch")
    checkpoint = train.Checkpoint(params=params, optimizer=optimizer, epoch=epoch)
    manager = train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3)
    if args.resume and manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        if chief:
            print(f"resumed from {manager.latest_checkpoint} at epoch {int(epoch.numpy())}")

    dataset = (
        data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=args.seed)
        .batch(args.global_batch)
    )
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    names = sorted(params)

    def step(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        values = {k: np.asarray(params[k].numpy()) for k in names}
        loss, correct, grads = forward_backward(values, x, y, args.global_batch)
        optimizer.apply_gradients([(grads[k], params[k]) for k in names])
        return loss, correct

    dumps: list[np.ndarray] = []
    steps_per_epoch = -(-len(x_train) // args.global_batch)
    while int(epoch.numpy()) < args.epochs:
        progress = _progress(chief and not args.quiet, steps_per_epoch, int(epoch.numpy()))
        total_loss, total_correct = 0.0, 0
        for x, y in dist_dataset:
            loss, correct = strategy.run(step, args=(x, y))
            total_loss += float(strategy.reduce(distribute.ReduceOp.SUM, loss, axis=None))
            total_correct += int(strategy.reduce(distribute.ReduceOp.SUM, correct, axis=None))
            if args.dump is not None:
                dumps.append(_all_replica_weights(strategy, params, names))
            if progress is not None:
                progress.update(1)
        if progress is not None:
            progress.close()
        epoch.assign_add(np.int64(1))
        manager.save()
        if chief:
            accuracy = _accuracy(params, names, x_test, y_test)
            print(
                f"epoch {int(epoch.numpy())}: loss {total_loss / steps_per_epoch:.4f} "
                f"train accuracy {total_correct / len(x_train):.3f} "
                f"test accuracy {accuracy:.3f}",
                flush=True,
            )
    if args.dump is not None:
        rank = strategy.cluster_resolver.task_id if strategy.cluster_resolver else 0
        np.save(f"{args.dump}.rank{rank}.npy", np.stack(dumps) if dumps else np.empty(0))
    if chief:
        print(f"final test accuracy {_accuracy(params, names, x_test, y_test):.3f}", flush=True)
    return 0


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
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch + 1}", leave=False, file=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
