"""What the metric scenarios of ``metric_cases.py`` must give: Keras's pins and a serial reference.

The serial reference is written from the metrics' definitions in plain numpy (float64) over
every replica's batches at once, and imports nothing from mwms_mpi: a global result must equal
it whatever the world size, the number of local replicas or the order of the sums.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.metric_cases import DIST_METRICS, replica_batch

PINS = Path(__file__).with_name("metrics_tf_pins.json")


@functools.cache
def pins() -> dict[str, Any]:
    """The pinned Keras 3.15.1 outcomes: ``keras``, ``tf``, ``local`` and ``configs``
    (``{config: [worker 0's outcomes, worker 1's, ...]}``)."""
    loaded: dict[str, Any] = json.loads(PINS.read_text(encoding="utf-8"))
    return loaded


def matches(expected: Any, found: Any) -> bool:
    """Whether two outcomes agree: the same error type, or the same dtype and shape and values
    within a few ulps of the dtype (sums in another order round differently)."""
    if isinstance(expected, list):
        return len(expected) == len(found) and all(map(matches, expected, found))
    if "error" in expected or "error" in found:
        return bool(expected == found)
    if (expected["dtype"], expected["shape"]) != (found["dtype"], found["shape"]):
        return False
    eps = 1e-3 if expected["dtype"] == "float16" else 1e-6
    return bool(np.isclose(found["value"], expected["value"], rtol=eps, atol=eps * 1e-3))


def _samples(metric: str, replicas: Iterable[int], steps: Iterable[int]) -> tuple[Any, Any]:
    """Every per-sample value and weight of ``replicas`` at ``steps``, by the definitions."""
    values, weights = [], []
    for r in replicas:
        for step in steps:
            args, kwargs = replica_batch(metric, r, step)
            arrays = [np.asarray(a, np.float64) for a in args]
            if metric in ("Mean", "Sum"):
                v = arrays[0]
            elif metric == "Accuracy":
                v = (arrays[0] == arrays[1]).astype(np.float64)
            elif metric == "SparseCategoricalAccuracy":
                v = (np.argmax(arrays[1], -1) == arrays[0]).astype(np.float64)
            elif metric == "CategoricalAccuracy":
                v = (np.argmax(arrays[1], -1) == np.argmax(arrays[0], -1)).astype(np.float64)
            else:
                v = ((arrays[0] - arrays[1]) ** 2).mean(-1)
            w = np.asarray(kwargs.get("sample_weight", np.ones(len(v))), np.float64)
            values.append(v)
            weights.append(w)
    return np.concatenate(values), np.concatenate(weights)


def serial(metric: str, replicas: Iterable[int], steps: Iterable[int]) -> dict[str, Any]:
    """The float32 outcome of ``metric`` fed the batches of ``replicas`` at ``steps``."""
    values, weights = _samples(metric, list(replicas), list(steps))
    total = float(np.sum(values * weights))
    if metric == "Sum":
        value = total
    else:
        count = float(np.sum(weights))
        value = total / count if count else 0.0
    return {"value": float(np.float32(value)), "dtype": "float32", "shape": []}


def _extra(metric: str, replicas: int) -> dict[str, Any]:
    """After both steps, replica 0's step-0 batch once more (the cross-replica update)."""
    values, weights = _samples(metric, range(replicas), (0, 1))
    v0, w0 = _samples(metric, [0], [0])
    values, weights = np.concatenate([values, v0]), np.concatenate([weights, w0])
    value = float(np.sum(values * weights)) / float(np.sum(weights))
    return {"value": float(np.float32(value)), "dtype": "float32", "shape": []}


def expected_distributed(replicas: int, local: Iterable[int]) -> dict[str, Any]:
    """The serial outcomes of ``metric_cases.run_distributed`` with ``replicas`` replicas in
    all, ``local`` being this worker's global replica ids (its replica-context results)."""
    zero = {"value": 0.0, "dtype": "float32", "shape": []}
    everyone = range(replicas)
    out: dict[str, Any] = {}
    for m in DIST_METRICS:
        out[f"{m}/step0"] = serial(m, everyone, [0])
        out[f"{m}/step1"] = serial(m, everyone, [0, 1])
        out[f"{m}/reset"] = zero
        out[f"{m}/restored"] = serial(m, everyone, [0])
        out[f"{m}/resumed_step1"] = serial(m, everyone, [0, 1])
    out["Mean/replica_context_result"] = [serial("Mean", [r], [0, 1]) for r in local]
    for m in ("Mean", "Accuracy"):
        out[f"{m}/cross_replica_update"] = _extra(m, replicas)
    return out
