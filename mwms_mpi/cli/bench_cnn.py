"""``mwms-mpi bench --model cnn``: a JAX CNN's training step, split into its parts.

Run: ``mpiexec -n 2 python -m mwms_mpi.cli.bench_cnn [--steps N] [--json-only]`` (needs the
``[jax]`` extra).

The main job's step (scripts/train_digits_cnn.py: conv 3x3x8 -> relu -> 2x2 max pool -> dense
10, global batch 64, Adam) is timed two ways, alternating step by step so that the machine's
drift hits both alike, every rank starting together after a barrier, the slowest rank's time
kept (a step is as slow as its last rank):

- ``mwms_mpi``: the script's step: ``next`` on ``experimental_distribute_dataset`` of a
  shuffled ``from_tensor_slices(...).batch(64)``, then ``strategy.run`` of: read the variables,
  JAX's jitted loss and gradients, ``optimizer.apply_gradients`` (one agreed, packed
  ``batch_reduce_to``, then the update of every copy).
- ``raw``: the same arithmetic with nothing of ours: the rank's rows picked by index from a
  shuffled order, the same jitted JAX function, the gradients packed by hand into one in-place
  ``Allreduce``, and Adam's update in place on plain numpy arrays.

Reported (medians over the steps): the whole step of each; inside ours, the library's share
(JAX forward + backward, timed around the call) and, from the raw step, the raw collective
(its ``Allreduce``, its waiting for the slower rank included: ours absorbs the same wait in its
agreement). mwms_mpi's share is the rest of our step: input pipeline, variable reads,
conversions, agreement, optimizer update, ``strategy.run``. Its parts are printed too.
The same measure of the raw step (``raw_own``: its rows by index, its packing and its numpy
Adam, as a share of the raw step) is the floor of that share: what the step costs with
nothing of ours in it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _mpi

CHANNELS, GLOBAL_BATCH, EXAMPLES, LEARNING_RATE = 8, 64, 1500, 0.01
BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7


def _jax() -> Any:
    """JAX, configured as the main job configures it (imported only here: an optional extra)."""
    jax = importlib.import_module("jax")
    jax.config.update("jax_cpu_enable_async_dispatch", False)  # ranks share the cores
    return jax


def loss_and_grads_fn(jax: Any, channels: int, global_batch: int) -> Callable[..., Any]:
    """The main job's jitted loss-and-gradient function (pure: nothing of ours inside)."""
    jnp = jax.numpy

    def loss_fn(p: dict[str, Any], x: Any, y: Any) -> Any:
        h = jax.lax.conv_general_dilated(
            x, p["conv_w"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        h = jax.nn.relu(h + p["conv_b"])
        h = h.reshape(x.shape[0], 3, 2, 3, 2, channels).max(axis=(2, 4))
        logits = h.reshape(x.shape[0], -1) @ p["dense_w"] + p["dense_b"]
        log_probs = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(log_probs, y[:, None], axis=1).sum() / global_batch

    return jax.jit(jax.value_and_grad(loss_fn))


def initial_weights(channels: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "conv_b": np.zeros(channels, np.float32),
        "conv_w": (rng.standard_normal((3, 3, 1, channels)) * 0.47).astype(np.float32),
        "dense_b": np.zeros(10, np.float32),
        "dense_w": (rng.standard_normal((9 * channels, 10)) * 0.12).astype(np.float32),
    }


def inputs() -> tuple[np.ndarray, np.ndarray]:
    """Digits-shaped data (8x8x1 images, 10 classes); the values do not change the timing."""
    rng = np.random.default_rng(1)
    return rng.random((EXAMPLES, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, EXAMPLES)


class OurStep:
    """The main job's step through mwms_mpi, with the time of its parts (this rank's)."""

    def __init__(self, jax: Any, channels: int, global_batch: int) -> None:
        from mwms_mpi import data, distribute, optimizers
        from mwms_mpi.values import Variable

        self.strategy = distribute.MultiWorkerMirroredStrategy()
        self.loss_and_grads = loss_and_grads_fn(jax, channels, global_batch)
        self.jax = jax
        with self.strategy.scope():
            self.params = {k: Variable(v, name=k) for k, v in initial_weights(channels).items()}
            self.optimizer = optimizers.Adam(LEARNING_RATE)
            self.optimizer.build(list(self.params.values()))
        x, y = inputs()
        dataset = data.Dataset.from_tensor_slices((x, y.astype(np.int32)))
        dataset = dataset.shuffle(EXAMPLES, seed=1).batch(global_batch, drop_remainder=True)
        self.iterator = iter(self.strategy.experimental_distribute_dataset(dataset.repeat()))
        self.parts = {"input": 0.0, "library": 0.0, "apply_gradients": 0.0}

    def _replica_step(self, x: Any, y: Any) -> None:
        values = {k: v.read_only_value() for k, v in self.params.items()}
        start = time.perf_counter()
        _, grads = self.loss_and_grads(values, x, y)
        self.jax.block_until_ready(grads)
        middle = time.perf_counter()
        self.optimizer.apply_gradients([(grads[k], v) for k, v in self.params.items()])
        self.parts["library"] = middle - start
        self.parts["apply_gradients"] = time.perf_counter() - middle

    def __call__(self) -> None:
        start = time.perf_counter()
        x, y = next(self.iterator)
        self.parts["input"] = time.perf_counter() - start
        self.strategy.run(self._replica_step, args=(x, y))


class RawStep:
    """The same step with mpi4py, numpy and JAX alone (the baseline)."""

    def __init__(self, jax: Any, comm: Any, channels: int, global_batch: int) -> None:
        self.comm, self.jax, self.MPI = comm, jax, _mpi.mpi()
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.loss_and_grads = loss_and_grads_fn(jax, channels, global_batch)
        self.global_batch = global_batch
        self.params = initial_weights(channels)
        self.names = sorted(self.params)
        self.m = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.x, self.y = inputs()
        self.y = self.y.astype(np.int32)
        self.order = np.random.default_rng(1).permutation(EXAMPLES)
        self.position, self.t = 0, 0
        self.parts = {"collective": 0.0}

    def __call__(self) -> None:
        per = self.global_batch // self.size
        if self.position + self.global_batch > EXAMPLES:
            self.position = 0
        rows = self.order[self.position + self.rank * per : self.position + (self.rank + 1) * per]
        self.position += self.global_batch
        x, y = self.x[rows], self.y[rows]
        _, grads = self.loss_and_grads(self.params, x, y)
        packed = np.concatenate([np.asarray(grads[k]).ravel() for k in self.names])
        start = time.perf_counter()
        self.comm.Allreduce(self.MPI.IN_PLACE, packed, self.MPI.SUM)
        self.parts["collective"] = time.perf_counter() - start
        self.t += 1
        alpha = LEARNING_RATE * np.sqrt(1 - BETA_2**self.t) / (1 - BETA_1**self.t)
        offset = 0
        for k in self.names:
            p, m, v = self.params[k], self.m[k], self.v[k]
            g = packed[offset : offset + p.size].reshape(p.shape)
            offset += p.size
            m += (g - m) * (1 - BETA_1)
            v += (g * g - v) * (1 - BETA_2)
            p -= (m * alpha) / (np.sqrt(v) + EPSILON)


def _slowest(comm: Any, values: Sequence[float]) -> list[float]:
    MPI = _mpi.mpi()
    local = np.asarray(values, dtype=np.float64)
    slowest = np.empty_like(local)
    comm.Allreduce(local, slowest, MPI.MAX)
    return [float(v) for v in slowest]


def measure(
    steps: int, warmup: int, channels: int = CHANNELS, global_batch: int = GLOBAL_BATCH
) -> dict[str, Any]:
    """Medians (seconds) of each step and of each part, over ``steps`` alternating steps."""
    jax = _jax()
    comm = _mpi.mpi().COMM_WORLD.Dup()
    ours = OurStep(jax, channels, global_batch)
    raw = RawStep(jax, comm, channels, global_batch)
    samples: dict[str, list[float]] = {k: [] for k in ("mwms_mpi", "raw", *ours.parts, *raw.parts)}
    variants: list[tuple[str, Any]] = [("mwms_mpi", ours), ("raw", raw)]
    for i in range(warmup + steps):
        for name, step in variants if i % 2 == 0 else variants[::-1]:
            comm.Barrier()
            start = time.perf_counter()
            step()
            elapsed = time.perf_counter() - start
            names = [name, *step.parts]
            got = _slowest(comm, [elapsed, *step.parts.values()])
            if i >= warmup:
                for key, value in zip(names, got, strict=True):
                    samples[key].append(value)
    comm.Free()
    return {k: statistics.median(v) for k, v in samples.items()}


def summary(
    medians: dict[str, Any], ranks: int, channels: int, global_batch: int
) -> dict[str, Any]:
    """One record: the step, its parts, and each part's share of our step."""
    step = medians["mwms_mpi"]
    ours = step - medians["library"] - medians["collective"]
    us = {k: round(v * 1e6, 1) for k, v in medians.items()}
    return {
        "case": "cnn step",
        "ranks": ranks,
        "channels": channels,
        "global_batch": global_batch,
        "median_us": us,
        "share": {
            "library": round(medians["library"] / step, 3),
            "raw_collective": round(medians["collective"] / step, 3),
            "mwms_mpi": round(ours / step, 3),
            # the same measure of the raw step: its own rows by index, packing and numpy Adam
            # (what a zero-cost mwms_mpi would still do), as a share of the raw step
            "raw_own": round(
                (medians["raw"] - medians["library"] - medians["collective"]) / medians["raw"], 3
            ),
        },
        "ratio_to_raw_step": round(step / medians["raw"], 3),
    }


def table(record: dict[str, Any]) -> str:
    us, share = record["median_us"], record["share"]
    lines = [
        f"\nCNN step (conv 3x3x{record['channels']}, global batch {record['global_batch']}), "
        f"{record['ranks']} ranks; medians, slowest rank",
        f"{'our step':<34}{us['mwms_mpi']:>10} us",
        f"{'raw step (mpi4py + numpy + JAX)':<34}{us['raw']:>10} us"
        f"   ours / raw {record['ratio_to_raw_step']}",
        f"{'  library (JAX fwd + bwd)':<34}{us['library']:>10} us   {share['library']:.1%}",
        f"{'  raw collective (in the raw step)':<34}{us['collective']:>10} us"
        f"   {share['raw_collective']:.1%}",
        f"{'  mwms_mpi (the rest of ours)':<34}"
        f"{us['mwms_mpi'] - us['library'] - us['collective']:>10.1f} us   {share['mwms_mpi']:.1%}",
        f"{'    of which input pipeline':<34}{us['input']:>10} us",
        f"{'    of which apply_gradients':<34}{us['apply_gradients']:>10} us (collective incl.)",
        f"{'raw step less library, collective':<34}"
        f"{us['raw'] - us['library'] - us['collective']:>10.1f} us   {share['raw_own']:.1%}"
        " of the raw step",
    ]
    return "\n".join(lines)


def run(
    steps: int = 400,
    json_only: bool = False,
    channels: int = CHANNELS,
    global_batch: int = GLOBAL_BATCH,
) -> int:
    """The CNN phase as a command: one JSON record, then the table, on rank 0."""
    medians = measure(steps, max(20, steps // 10), channels, global_batch)
    comm = _mpi.mpi().COMM_WORLD
    if comm.Get_rank() == 0:
        record = summary(medians, comm.Get_size(), channels, global_batch)
        print(json.dumps(record), flush=True)
        if not json_only:
            print(table(record), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mwms_mpi.cli.bench_cnn", description=__doc__)
    parser.add_argument("--steps", type=int, default=400, help="timed steps of each variant")
    parser.add_argument("--json-only", action="store_true", help="the JSON record, no table")
    parser.add_argument("--channels", type=int, default=CHANNELS, help="conv filters (8)")
    parser.add_argument("--global-batch", type=int, default=GLOBAL_BATCH, help="(64)")
    options = parser.parse_args(argv)
    return run(options.steps, options.json_only, options.channels, options.global_batch)


if __name__ == "__main__":
    sys.exit(main())
