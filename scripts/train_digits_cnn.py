"""Data-parallel training of a small CNN on scikit-learn's digits, gradients from JAX.

The project's main job (``make demo``): forward pass, loss and gradients come from JAX; the
variables, the sharded input, the optimizer, the cross-replica sums, checkpoints and
preemption come from mwms_mpi's ``tf.distribute`` API:

    mpiexec -n 2 .venv/bin/python -m mwms_mpi.run scripts/train_digits_cnn.py
    mpiexec -n 2 .venv/bin/python -m mwms_mpi.run scripts/train_digits_cnn.py --resume \
        --checkpoint-dir checkpoints/digits-20260101-120000-4242

Model: conv 3x3 (``--channels`` filters, VALID) -> relu -> 2x2 max pool -> dense 10.
Everything but the model and the step is ``scripts/train_digits.py``'s (the numpy MLP, ``make
demo-numpy``): the options, the checkpoint directory per run, ``--resume``/``--resume=auto``
and ``$MWMS_CHECKPOINT_DIR``, the refusals, SIGTERM -> every worker saves the same step and
exits 42, ``--deterministic``, ``--dump``. docs/autodiff.md explains the JAX rules followed here:

- only the pure loss-and-gradient function is jitted: an mwms_mpi call under ``jax.jit`` would
  receive tracers, and a variable read under jit would be frozen at trace time;
- JAX's asynchronous dispatch is off: ranks share the CPU cores, and measured n=2 steps were
  1.6x slower with it on;
- max pooling by reshape + max (``lax.reduce_window``'s gradient is 2x slower on CPU);
- ``--dtype float64`` turns on ``jax_enable_x64`` (else JAX silently computes in float32);
- the last, partial batch is kept (as the MLP does, so N workers train exactly like one): each
  new per-replica batch shape compiles once more, then comes from jit's cache;
- no randomness in the model; dropout would need a key per replica from
  ``replica_id_in_sync_group`` (docs/autodiff.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_digits, also under a wrapper
import train_digits as base

import mwms_mpi
from mwms_mpi import distribute
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver

RESTART_CODE = base.RESTART_CODE
# Options that decide the model, the optimizer and the data order: a checkpoint resumes only
# under the same ones (the number of workers and replicas may change).
MODEL_OPTIONS = (*base.MODEL_OPTIONS, "channels")


def make_model(channels: int, global_batch: int) -> tuple[Any, Any]:
    """``(logits_fn, loss_and_grads)``; only ``loss_and_grads`` and the evaluation are jitted."""
    import jax
    import jax.numpy as jnp

    def logits_fn(p: dict[str, Any], x: Any) -> Any:
        h = jax.lax.conv_general_dilated(
            x, p["conv_w"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        h = jax.nn.relu(h + p["conv_b"])
        h = h.reshape(x.shape[0], 3, 2, 3, 2, channels).max(axis=(2, 4))  # 2x2 max pool
        return h.reshape(x.shape[0], -1) @ p["dense_w"] + p["dense_b"]

    def loss_fn(p: dict[str, Any], x: Any, y: Any) -> tuple[Any, Any]:
        """Summed over this replica's examples / the GLOBAL batch (TF's compute_average_loss),
        so the optimizer's sum over replicas is the full batch's gradient."""
        logits = logits_fn(p, x)
        log_probs = jax.nn.log_softmax(logits)
        loss = -jnp.take_along_axis(log_probs, y[:, None], axis=1).sum() / global_batch
        return loss, (logits.argmax(axis=1) == y).sum()

    @jax.jit  # pure: no mwms_mpi call, no variable read inside
    def loss_and_grads(p: dict[str, Any], x: Any, y: Any) -> tuple[Any, Any, Any]:
        (loss, correct), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
        return loss, correct, grads

    return jax.jit(logits_fn), loss_and_grads


def initial_weights(dtype: Any, seed: int, channels: int) -> dict[str, np.ndarray]:
    """He-style initialisation; only the chief's values matter (creation broadcasts them)."""
    rng = np.random.default_rng(seed)
    return {
        "conv_w": (rng.standard_normal((3, 3, 1, channels)) * np.sqrt(2 / 9)).astype(dtype),
        "conv_b": np.zeros(channels, dtype),
        "dense_w": (rng.standard_normal((9 * channels, 10)) * np.sqrt(2 / (9 * channels))).astype(
            dtype
        ),
        "dense_b": np.zeros(10, dtype),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """train_digits.py's options, with the CNN's defaults where they differ, and ``--channels``."""
    given = sys.argv[1:] if argv is None else argv
    if "-h" in given or "--help" in given:  # train_digits.py's help follows, then exits
        defaults = ", ".join(f"{k} {v}" for k, v in CNN_DEFAULTS.items())
        print(
            f"{__doc__.splitlines()[0]}\n\nThe options of scripts/train_digits.py below, with "
            f"these defaults: {defaults}; and --channels N (conv filters, default 8).\n"
        )
    ours, rest = _parser().parse_known_args(given)
    args = base.parse_args(rest)
    args.channels = ours.channels
    for flag, value in CNN_DEFAULTS.items():
        if not any(a == flag or a.startswith(flag + "=") for a in given):
            setattr(args, flag[2:].replace("-", "_"), value)
    if args.device != "cpu":
        raise SystemExit("train_digits_cnn.py: error: --device gpu: this demo's JAX runs on CPUs")
    return args


# Where the CNN's defaults differ from the MLP's (Adam suits the conv layer's small gradients).
CNN_DEFAULTS = {"--epochs": 10, "--learning-rate": 0.01, "--optimizer": "adam"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--channels", type=base._at_least(1), default=8)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)  # ranks share the cores
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)  # else JAX computes in float32, silently
    if args.deterministic:
        mwms_mpi.config.experimental.enable_op_determinism()
    dtype = np.dtype(args.dtype)
    resolver = MPIClusterResolver(num_accelerators={"CPU": args.replicas_per_worker})
    strategy = distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    config = {"model": "cnn", **{k: getattr(args, k) for k in MODEL_OPTIONS}}
    x_train, y_train, x_test, y_test = (
        a.reshape(-1, 8, 8, 1) if a.ndim == 2 else a for a in base.load_digits(dtype, args.seed)
    )
    logits_fn, loss_and_grads = make_model(args.channels, args.global_batch)

    def accuracy(params: dict[str, Any], names: list[str]) -> float:
        weights = {k: params[k].numpy() for k in names}
        return float((np.asarray(logits_fn(weights, x_test)).argmax(1) == y_test).mean())

    initial = initial_weights(dtype, args.seed, args.channels)
    job = base.Job(args, strategy, config, initial, (x_train, y_train))
    # JAX's loss, count and gradients go into the TF API as they are
    return job.train(loss_and_grads, accuracy, loss_format=".8f")


if __name__ == "__main__":
    sys.exit(main())
