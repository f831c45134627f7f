"""Metric scenarios written once for Keras 3.15.1 (under TF 2.21) and for ``mwms_mpi.metrics``.

Imports neither TF nor mwms_mpi: a runner passes the metrics namespace (``keras.metrics`` or
``mwms_mpi.metrics``), the strategy and a checkpoint factory. Keras's outcomes are pinned in
``metrics_tf_pins.json`` beside this file, written by a scratch program kept outside the
repository (it imports TF; ``/work/tfscratch/metrics/record.py`` on the development machine)
that runs :func:`run_local` with no strategy and :func:`run_distributed` under TF 2.21.0 +
Keras 3.15.1's MirroredStrategy on two logical CPUs (``mirrored_k2``) and
MultiWorkerMirroredStrategy with one worker (``mwms_n1_k1``) and two workers of one and two
local replicas (``mwms_n2_k1``, ``mwms_n2_k2``; loopback ``TF_CONFIG``, as
``differential.py`` runs them), one list entry per worker. An outcome is
``{"value", "dtype", "shape"}`` of a result, or ``{"error"}`` (the exception's type name).

Distributed scenarios feed replica ``r`` of ``R`` its own batches (:func:`replica_batch`), so a
global result depends on ``R`` only (each pinned run records its ``R``); a replica-context
result depends on the worker's own replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

KERAS_VERSION = "3.15.1"
TF_VERSION = "2.21.0"

Update = tuple[tuple[Any, ...], dict[str, Any]]

# name -> (metric class, constructor kwargs, update_state calls). Python lists exercise
# ``tf.constant``'s conversion (float32 / int32), numpy arrays keep their dtypes.
LOCAL_CASES: dict[str, tuple[str, dict[str, Any], list[Update]]] = {
    "mean_basic": ("Mean", {}, [(([1, 3, 5, 7],), {})]),
    "mean_sw": ("Mean", {}, [(([1, 3, 5, 7],), {"sample_weight": [1, 1, 0, 0]})]),
    "mean_sw_scalar": ("Mean", {}, [(([1, 3, 5, 7],), {"sample_weight": 2.0})]),
    "mean_sw_scalar_then": (
        "Mean",
        {},
        [(([1, 3, 5, 7],), {"sample_weight": 2.0}), (([10],), {})],
    ),
    "mean_int_dtype": ("Mean", {"dtype": "int32"}, [(([1, 2],), {})]),
    "mean_mixed_f16": ("Mean", {"dtype": "mixed_float16"}, [(([1, 2],), {})]),
    "mean_2d": ("Mean", {}, [(([[1, 2, 3], [4, 5, 6]],), {})]),
    "mean_2d_sw1d": ("Mean", {}, [(([[1, 2, 3], [4, 5, 6]],), {"sample_weight": [1, 0.5]})]),
    "mean_2d_swcol": (
        "Mean",
        {},
        [(([[1, 2, 3], [4, 5, 6]],), {"sample_weight": [[1], [0.5]]})],
    ),
    "mean_2d_swfull": (
        "Mean",
        {},
        [(([[1, 2, 3], [4, 5, 6]],), {"sample_weight": [[1, 0, 1], [0.5, 0.5, 0]]})],
    ),
    "mean_col_sw1d": ("Mean", {}, [(([[1], [3]],), {"sample_weight": [2, 1]})]),
    "mean_1d_swcol": ("Mean", {}, [(([1, 3],), {"sample_weight": [[2], [1]]})]),
    "mean_3d_sw1d": (
        "Mean",
        {},
        [(([[[1, 2], [3, 4]], [[5, 6], [7, 8]]],), {"sample_weight": [1, 3]})],
    ),
    "mean_scalars": ("Mean", {}, [((5.0,), {}), ((2,), {}), ((np.float64(0.5),), {})]),
    "mean_empty": ("Mean", {}, []),
    "mean_twice": ("Mean", {}, [(([1, 2],), {}), (([3],), {"sample_weight": [2]})]),
    "mean_zero_count": ("Mean", {}, [(([1, 3],), {"sample_weight": [1, -1]})]),
    "mean_f64": ("Mean", {"dtype": "float64"}, [(([0.1, 0.2, 0.4],), {})]),
    "mean_f16": ("Mean", {"dtype": "float16"}, [(([0.1, 0.2, 0.4],), {})]),
    "mean_np_f64": ("Mean", {}, [((np.array([0.1, 0.2, 0.4]),), {})]),
    "mean_bool": ("Mean", {}, [(([True, False, True],), {})]),
    "mean_named": ("Mean", {"name": "train_loss"}, [(([2.5],), {})]),
    "sum_basic": ("Sum", {}, [(([1, 3, 5, 7],), {})]),
    "sum_sw": ("Sum", {}, [(([1, 3, 5, 7],), {"sample_weight": [1, 1, 0, 0]})]),
    "sum_sw_scalar": ("Sum", {}, [(([1, 3, 5, 7],), {"sample_weight": 2.0})]),
    "sum_2d": ("Sum", {}, [(([[1, 2, 3], [4, 5, 6]],), {})]),
    "sum_2d_sw1d": ("Sum", {}, [(([[1, 2, 3], [4, 5, 6]],), {"sample_weight": [1, 0.5]})]),
    "sum_2d_swcol": ("Sum", {}, [(([[1, 2, 3], [4, 5, 6]],), {"sample_weight": [[1], [0.5]]})]),
    "sum_scalars": ("Sum", {}, [((5.0,), {}), ((2,), {})]),
    "sum_f64": ("Sum", {"dtype": "float64"}, [(([0.1, 0.2, 0.4],), {})]),
    "sum_empty": ("Sum", {}, []),
    "sum_int_dtype_floats": ("Sum", {"dtype": "int32"}, [(([1.7, 2.2, -1.5],), {})]),
    "acc_doc": ("Accuracy", {}, [(([[1], [2], [3], [4]], [[0], [2], [3], [4]]), {})]),
    "acc_doc_sw": (
        "Accuracy",
        {},
        [(([[1], [2], [3], [4]], [[0], [2], [3], [4]]), {"sample_weight": [1, 1, 0, 0]})],
    ),
    "acc_no_threshold": ("Accuracy", {}, [(([1, 0, 1, 0], [0.6, 0.4, 1.0, 0.0]), {})]),
    "acc_int_true_f32_pred": (
        "Accuracy",
        {},
        [(([1, 2], np.array([1.0, 2.5], np.float32)), {})],
    ),
    "acc_f64_pred": ("Accuracy", {}, [((np.array([1, 2]), np.array([1.0, 2.0])), {})]),
    "acc_rank_1_vs_col": ("Accuracy", {}, [(([1, 2, 3], [[1], [2], [0]]), {})]),
    "acc_2d": ("Accuracy", {}, [(([[1, 2], [3, 4]], [[1, 0], [3, 4]]), {})]),
    "acc_sw_scalar_then": (
        "Accuracy",
        {},
        [(([1, 2, 3], [1, 2, 0]), {"sample_weight": 4.0}), (([1], [1]), {})],
    ),
    "acc_int_pred_float_true": ("Accuracy", {}, [(([1.0, 2.5], [1, 2]), {})]),
    "acc_2d_sw1d": (
        "Accuracy",
        {},
        [(([[1, 2], [3, 4]], [[1, 0], [3, 4]]), {"sample_weight": [3, 1]})],
    ),
    "sca_doc": (
        "SparseCategoricalAccuracy",
        {},
        [(([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]]), {})],
    ),
    "sca_doc_sw": (
        "SparseCategoricalAccuracy",
        {},
        [(([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]]), {"sample_weight": [0.7, 0.3]})],
    ),
    "sca_1d": (
        "SparseCategoricalAccuracy",
        {},
        [(([2, 1], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]]), {})],
    ),
    "sca_int64": (
        "SparseCategoricalAccuracy",
        {},
        [((np.array([2, 1, 0]), np.array([[0, 0, 1], [0, 1, 0], [0, 1, 0]], np.float32)), {})],
    ),
    "sca_float_labels": (
        "SparseCategoricalAccuracy",
        {},
        [(([2.0, 1.0, 0.5], [[0, 0, 1], [0, 1, 0], [1, 0, 0]]), {})],
    ),
    "sca_tie": (
        "SparseCategoricalAccuracy",
        {},
        [(([1, 0], [[0.5, 0.5, 0], [0.2, 0.2, 0.1]]), {})],
    ),
    "sca_3d": (
        "SparseCategoricalAccuracy",
        {},
        [(([[0, 1], [2, 2]], [[[1, 0, 0], [1, 0, 0]], [[0, 0, 1], [0, 1, 0]]]), {})],
    ),
    "sca_sw_col": (
        "SparseCategoricalAccuracy",
        {},
        [(([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]]), {"sample_weight": [[0.7], [0.3]]})],
    ),
    "ca_doc": (
        "CategoricalAccuracy",
        {},
        [(([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]]), {})],
    ),
    "ca_doc_sw": (
        "CategoricalAccuracy",
        {},
        [
            (
                ([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]]),
                {"sample_weight": [0.7, 0.3]},
            )
        ],
    ),
    "ca_tie": (
        "CategoricalAccuracy",
        {},
        [(([[0, 1, 0], [1, 0, 0]], [[0.5, 0.5, 0], [0, 0, 0]]), {})],
    ),
    "ca_3d": (
        "CategoricalAccuracy",
        {},
        [
            (
                (
                    [[[1, 0], [0, 1]], [[1, 0], [1, 0]]],
                    [[[0.9, 0.1], [0.2, 0.8]], [[0.3, 0.7], [0.6, 0.4]]],
                ),
                {},
            )
        ],
    ),
    "mean_bad_sw": ("Mean", {}, [(([1, 2, 3],), {"sample_weight": [1, 2]})]),
    "acc_bad_shapes": ("Accuracy", {}, [(([1, 2, 3], [1, 2]), {})]),
    "mse_bad_shapes": ("MeanSquaredError", {}, [(([[1, 2, 3]], [[1, 2]]), {})]),
    "sca_neg_zero": ("SparseCategoricalAccuracy", {}, [(([1], [[-0.0, 0.0]]), {})]),
    "mse_doc": ("MeanSquaredError", {}, [(([[0, 1], [0, 0]], [[1, 1], [0, 0]]), {})]),
    "mse_doc_sw": (
        "MeanSquaredError",
        {},
        [(([[0, 1], [0, 0]], [[1, 1], [0, 0]]), {"sample_weight": [1, 0]})],
    ),
    "mse_1d": ("MeanSquaredError", {}, [(([0.0, 1.0, 2.0], [1.0, 1.0, 1.0]), {})]),
    "mse_1d_twice": (
        "MeanSquaredError",
        {},
        [(([0.0, 1.0, 2.0], [1.0, 1.0, 1.0]), {}), (([0.0, 0.0], [3.0, 3.0]), {})],
    ),
    "mse_col_vs_1d": ("MeanSquaredError", {}, [(([[0.0], [1.0]], [1.0, 3.0]), {})]),
    "mse_int_inputs": ("MeanSquaredError", {}, [(([[0, 1], [2, 2]], [[1, 3], [2, 3]]), {})]),
    "mse_f64_pred": (
        "MeanSquaredError",
        {},
        [((np.array([[0.1, 0.2]], np.float32), np.array([[0.3, 0.7]])), {})],
    ),
    "mse_f64_metric": (
        "MeanSquaredError",
        {"dtype": "float64"},
        [(([[0.1, 0.2]], [[0.3, 0.7]]), {})],
    ),
}


def describe(result: Any) -> dict[str, Any]:
    """A result in neutral form: its value (as a Python float), dtype and shape."""
    array = np.asarray(result)
    return {"value": float(array), "dtype": str(array.dtype), "shape": list(array.shape)}


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    """``describe(fn())``, or the type name of the exception it raised."""
    try:
        return describe(fn())
    except Exception as e:  # recording which error is the point
        return {"error": type(e).__name__}


def run_local_case(metrics: Any, name: str) -> dict[str, Any]:
    """One local case: the result after its updates, then after ``reset_state``, and the
    metric's name, its variables' names (without ``:0``) and dtypes (keys ``name``,
    ``name/reset`` and ``name/meta``)."""
    cls, kwargs, updates = LOCAL_CASES[name]
    try:
        metric = getattr(metrics, cls)(**kwargs)
    except Exception as e:  # a constructor's refusal is an outcome too
        return {name: {"error": type(e).__name__}}

    def update() -> Any:
        for args, kw in updates:
            metric.update_state(*args, **kw)
        return metric.result()

    out = {name: outcome(update)}
    metric.reset_state()
    out[f"{name}/reset"] = outcome(metric.result)
    out[f"{name}/meta"] = {
        "name": metric.name,
        "variables": [v.name.split(":")[0] for v in metric.variables],
        "dtypes": [str(np.dtype(v.dtype)) for v in metric.variables],
    }
    return out


def run_local(metrics: Any) -> dict[str, Any]:
    """Every local case (:func:`run_local_case`)."""
    out: dict[str, Any] = {}
    for name in LOCAL_CASES:
        out.update(run_local_case(metrics, name))
    return out


# -- distributed: replica r of R feeds its own batches ------------------------------------------

DIST_METRICS = [
    "Mean",
    "Sum",
    "Accuracy",
    "SparseCategoricalAccuracy",
    "CategoricalAccuracy",
    "MeanSquaredError",
]


def replica_batch(metric: str, r: int, step: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Replica ``r``'s ``update_state`` arguments at ``step`` (0 or 1): numpy arrays of fixed
    dtypes (float32 values and weights, int32 labels), different on every replica."""
    f32, i32 = np.float32, np.int32
    s = step + 1
    if metric in ("Mean", "Sum"):
        values = np.array([r + 1, 2 * r + 3 * s, 0.5 * s, r * r], f32)
        weights = np.array([1, r % 3, 2, 0.25 * s], f32)
        return (values,), ({"sample_weight": weights} if step == 0 else {})
    if metric == "Accuracy":
        y_true = np.array([r % 3, 1, 2, r, s], i32)
        y_pred = np.array([0, 1, r % 2 + 1, r, 1], f32)
        return (y_true, y_pred), ({"sample_weight": np.array([1, 2, 1, 0.5, s], f32)})
    if metric in ("SparseCategoricalAccuracy", "CategoricalAccuracy"):
        labels = np.array([r % 3, (r + s) % 3, (2 * r + 1) % 3], i32)
        logits = np.array(
            [[(r + j * s) % 4 + 0.25 * j for j in range(3)] for _ in range(2)]
            + [[1.0 if j == (r % 3) else 0.0 for j in range(3)]],
            f32,
        )
        logits[1, :] = logits[1, ::-1]
        kwargs = {"sample_weight": np.array([1, 0.5, r + 1], f32)} if step == 1 else {}
        y_true = labels if metric == "SparseCategoricalAccuracy" else np.eye(3, dtype=f32)[labels]
        return (y_true, logits), kwargs
    if metric == "MeanSquaredError":
        y_true = np.array([[r, 1, 0.5], [0, r * s, 2]], f32)
        y_pred = np.array([[1, r, 0], [r + s, 2, 2]], f32)
        return (y_true, y_pred), {"sample_weight": np.array([1, 0.5 * s], f32)}
    raise ValueError(metric)


def make_metrics(metrics: Any) -> dict[str, Any]:
    """One metric of each class, named as a training loop would name them."""
    return {m: getattr(metrics, m)(name=f"train_{m.lower()}") for m in DIST_METRICS}


def run_step(strategy: Any, made: dict[str, Any], step: int) -> None:
    """One ``strategy.run`` in which every replica updates every metric with its own batch."""
    inputs = strategy.experimental_distribute_values_from_function(
        lambda ctx: {
            m: replica_batch(m, int(ctx.replica_id_in_sync_group), step) for m in DIST_METRICS
        }
    )

    def fn(batch: Any) -> None:
        for m in DIST_METRICS:
            args, kwargs = batch[m]
            made[m].update_state(*args, **kwargs)

    strategy.run(fn, args=(inputs,))


def run_distributed(
    metrics: Any, strategy: Any, checkpoint_of: Callable[[list[Any]], Any], directory: str
) -> dict[str, Any]:
    """Updates in replica context, results in cross-replica context (global values); an update
    in cross-replica context; reset; and a checkpoint taken after step 0, restored into fresh
    metrics that then take step 1: each must equal the uninterrupted run's step 1 result.

    ``checkpoint_of(metrics)`` makes the checkpoint: ``mwms_mpi.train.Checkpoint(metrics=...)``
    for ours; under TF, a checkpoint of the metrics' variables (a Keras 3 metric is no
    ``Trackable``: ``tf.train.Checkpoint`` refuses it with a ``ValueError``)."""
    out: dict[str, Any] = {}
    with strategy.scope():
        made = make_metrics(metrics)
    out["meta"] = {m: [v.name.split(":")[0] for v in made[m].variables] for m in DIST_METRICS}
    run_step(strategy, made, 0)
    for m in DIST_METRICS:
        out[f"{m}/step0"] = outcome(made[m].result)
    checkpoint = checkpoint_of(list(made.values()))
    path = checkpoint.write(f"{directory}/metrics")
    run_step(strategy, made, 1)
    for m in DIST_METRICS:
        out[f"{m}/step1"] = outcome(made[m].result)
    local = strategy.experimental_local_results(strategy.run(made["Mean"].result))
    out["Mean/replica_context_result"] = [describe(x) for x in local]
    # Keras 3's assign_add is assign(read + delta): in cross-replica context it reads the
    # global value, adds, and spreads the sum over the replicas (no error, unlike TF's own
    # SyncOnReadVariable.assign_add with aggregation SUM).
    for m in ("Mean", "Accuracy"):
        args, kwargs = replica_batch(m, 0, 0)
        metric = made[m]

        def cross(metric: Any = metric, args: Any = args, kwargs: Any = kwargs) -> Any:
            metric.update_state(*args, **kwargs)
            return metric.result()

        out[f"{m}/cross_replica_update"] = outcome(cross)
    for m in DIST_METRICS:
        made[m].reset_state()
        out[f"{m}/reset"] = outcome(made[m].result)
    with strategy.scope():
        fresh = make_metrics(metrics)
    checkpoint_of(list(fresh.values())).read(path)
    for m in DIST_METRICS:
        out[f"{m}/restored"] = outcome(fresh[m].result)
    run_step(strategy, fresh, 1)
    for m in DIST_METRICS:
        out[f"{m}/resumed_step1"] = outcome(fresh[m].result)
    return out
