"""A PyTorch model trained through mwms_mpi: gradients from ``torch.func``, the rest TF's API.

    mpiexec -n 2 python -m mwms_mpi.run examples/torch_digits.py [--epochs 3]

The model is an ordinary ``torch.nn.Module`` (a small CNN on scikit-learn's digits); its
parameters live in mwms_mpi Variables (mirrored on every replica, checkpointable, updated by
``optimizers.Adam`` after a cross-replica sum). ``torch.func.functional_call`` runs the module
with the variables' values in place of its own parameters, so the module is never mutated and
``torch.func.grad_and_value`` gives the gradients as a pure function, as ``jax.value_and_grad``
does in scripts/train_digits_cnn.py (docs/autodiff.md, "PyTorch").

Torch-specific points: one intra-op thread per rank (ranks share the cores); parameters are
float32 (torch refuses to mix float32 and float64); a tensor's ``.numpy()`` and
``torch.from_numpy`` share memory, so the values handed back to mwms_mpi are copies.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import mwms_mpi
from mwms_mpi import data, distribute, optimizers


def build_model(channels: int) -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(1, channels, 3),  # 8x8 -> 6x6
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),  # -> 3x3
        torch.nn.Flatten(),
        torch.nn.Linear(9 * channels, 10),
    )


def to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor as mwms_mpi takes it: a numpy copy (``.numpy()`` shares the memory)."""
    return np.array(tensor.detach().numpy())


def main(argv: list[str] | None = None) -> int:
    import torch
    from sklearn.datasets import load_digits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--channels", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the chief's initial values are broadcast: only they matter

    strategy = distribute.MultiWorkerMirroredStrategy()
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32).reshape(-1, 1, 8, 8)  # NCHW, as torch wants
    y = y.astype(np.int64)
    model = build_model(args.channels)
    with strategy.scope():
        params = {
            name: mwms_mpi.Variable(to_numpy(p), name=name.replace(".", "_"))
            for name, p in model.named_parameters()
        }
        optimizer = optimizers.Adam(0.01)
    names = list(params)
    global_batch = args.global_batch

    def loss_fn(p: dict[str, Any], xb: Any, yb: Any) -> Any:
        logits = torch.func.functional_call(model, p, (xb,))
        # summed over this replica's examples / the global batch: the sum over replicas is
        # the whole batch's mean gradient (TF's compute_average_loss)
        return torch.nn.functional.cross_entropy(logits, yb, reduction="sum") / global_batch

    grad_and_loss = torch.func.grad_and_value(loss_fn)

    def step(xb: np.ndarray, yb: np.ndarray) -> np.ndarray:
        values = {k: torch.from_numpy(params[k].read_value()) for k in names}
        grads, loss = grad_and_loss(values, torch.from_numpy(xb), torch.from_numpy(yb))
        optimizer.apply_gradients([(to_numpy(grads[k]), params[k]) for k in names])
        return to_numpy(loss)

    dataset = (
        data.Dataset.from_tensor_slices((x[:1500], y[:1500]))
        .shuffle(1500, seed=1)
        .batch(global_batch)
    )
    steps = -(-1500 // global_batch)
    for epoch in range(args.epochs):
        total = 0.0
        for xb, yb in strategy.experimental_distribute_dataset(dataset):
            per_replica = strategy.run(step, args=(xb, yb))
            total += float(strategy.reduce("SUM", per_replica, axis=None))
        weights = {k: torch.from_numpy(params[k].numpy()) for k in names}
        with torch.no_grad():
            logits = torch.func.functional_call(model, weights, (torch.from_numpy(x[1500:]),))
        accuracy = float((logits.argmax(1).numpy() == y[1500:]).mean())
        if strategy.extended.should_checkpoint:
            print(f"epoch {epoch + 1}: loss {total / steps:.4f} test accuracy {accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
