"""``mwms_mpi.metrics`` against Keras 3.15.1 under TF 2.21.0, and against a serial numpy reference.

The scenarios are ``tests/support/metric_cases.py``; Keras's outcomes are pinned in
``tests/support/metrics_tf_pins.json`` (how they were recorded: that module's docstring). Local
cases run with no strategy; the distributed scenario runs under the default strategy (one
replica, pinned as MultiWorkerMirroredStrategy with one worker) and MirroredStrategy on two CPU
replicas ("M2", pinned as TF's MirroredStrategy on two logical CPUs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
import mwms_mpi.metrics as metrics
from mwms_mpi.train import Checkpoint
from tests.support import metric_cases as mc
from tests.support.metric_reference import expected_distributed, matches, pins

A = mwms_mpi.VariableAggregation
S = mwms_mpi.VariableSynchronization


def test_pins_were_recorded_with_keras_3_15_1_and_tf_2_21() -> None:
    recorded = pins()
    assert (recorded["keras"], recorded["tf"]) == ("3.15.1", "2.21.0")
    assert (mc.KERAS_VERSION, mc.TF_VERSION) == ("3.15.1", "2.21.0")


@pytest.mark.parametrize("case", sorted(mc.LOCAL_CASES))
def test_local_case_matches_keras(case: str) -> None:
    keras = pins()["local"]
    ours = mc.run_local_case(metrics, case)
    for key, found in ours.items():
        if key.endswith("/meta"):
            # Keras names a variable "total" with path "<metric>/total"; ours are named by
            # their path, so that their reads' purposes tell metrics apart.
            expected = keras[key]
            assert found["name"] == expected["name"]
            assert found["variables"] == [f"{found['name']}/{v}" for v in expected["variables"]]
            assert found["dtypes"] == expected["dtypes"]
        else:
            assert matches(keras[key], found), (key, keras[key], found)


@pytest.mark.parametrize(
    ("config", "make"),
    [
        ("mwms_n1_k1", ds.get_strategy),
        ("mirrored_k2", lambda: ds.MirroredStrategy(["/cpu:0", "/cpu:1"])),
    ],
    ids=["default", "M2"],
)
def test_distributed_matches_keras_and_serial(config: str, make: Any, tmp_path: Path) -> None:
    strategy = make()
    replicas = strategy.num_replicas_in_sync
    ours = mc.run_distributed(metrics, strategy, lambda ms: Checkpoint(metrics=ms), str(tmp_path))
    keras = pins()["configs"][config][0]
    serial = expected_distributed(replicas, range(replicas))
    assert ours.keys() == keras.keys() - {"R"}
    for key, found in ours.items():
        if key == "meta":
            assert found == {m: [f"train_{m.lower()}/{v}" for v in keras[key][m]] for m in found}
            continue
        assert matches(keras[key], found), (key, keras[key], found)
        assert matches(serial[key], found), (key, serial[key], found)


def test_variables_are_sum_aggregated_sync_on_read_of_the_scope() -> None:
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        made = mc.make_metrics(metrics)
    for metric in made.values():
        for v in metric.variables:
            assert type(v).__name__ == "SyncOnReadVariable"
            assert (v.synchronization, v.aggregation) == (S.ON_READ, A.SUM)
            assert v.distribute_strategy is strategy
            assert not v.trainable
    plain = metrics.Mean()
    assert [type(v).__name__ for v in plain.variables] == ["Variable", "Variable"]


def test_result_is_a_0d_array_of_the_metric_dtype() -> None:
    for dtype in (None, "float64", "float16", "int32"):
        metric = metrics.Mean(dtype=dtype)
        metric.update_state([1, 2])
        result = metric.result()
        assert isinstance(result, np.ndarray) and result.shape == ()
        assert result.dtype == np.dtype("float32" if dtype in (None, "int32") else dtype)


def test_a_metric_in_a_checkpoint_saves_and_restores_its_state(tmp_path: Path) -> None:
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        saved, fresh = metrics.Mean(name="loss"), metrics.Mean(name="loss")
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.array([1.0, 2.0 + 4 * ctx.replica_id_in_sync_group], np.float32)
    )
    strategy.run(saved.update_state, args=(values,))
    path = Checkpoint(metric=saved).write(str(tmp_path / "ckpt"))
    Checkpoint(metric=fresh).read(path).assert_consumed()
    assert float(fresh.result()) == float(saved.result()) == 2.5  # (1 + 2 + 1 + 6) / 4
    assert [float(v.numpy()) for v in fresh.variables] == [10.0, 4.0]


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="dtype"):
        metrics.Mean(dtype="string")


def test_public_names_are_keras_metrics_names() -> None:
    # (pytest's assertion rewriting may add "@py_builtins" to a module: not a Python name)
    ours = {n for n in dir(metrics) if n.isidentifier() and not n.startswith("_")}
    assert ours == set(metrics.__all__)
    assert ours <= set(pins()["keras_metrics_names"])  # keras.metrics' public names, pinned


class _TruePositives(metrics.Metric):
    """Keras's own subclassing example (``keras.metrics.Metric``'s docstring), written here."""

    def __init__(self, name: str = "binary_true_positives", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), initializer="zeros", name="tp")

    def update_state(self, y_true: Any, y_pred: Any) -> None:
        hits = np.logical_and(np.asarray(y_true, bool), np.asarray(y_pred, bool))
        self.add_to(self.true_positives, np.sum(hits, dtype=np.float32))

    def result(self) -> np.ndarray:
        return self.read(self.true_positives)


def test_a_subclass_made_as_keras_documents_sums_every_replica() -> None:
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        metric = _TruePositives()
    batches = [([1, 1, 0, 1], [1, 0, 0, 1]), ([1, 1, 1, 0], [1, 1, 1, 1])]
    inputs = strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(np.array(b, np.int32) for b in batches[ctx.replica_id_in_sync_group])
    )
    strategy.run(metric.update_state, args=inputs)
    assert float(metric.result()) == 2 + 3
    assert [v.name for v in metric.variables] == ["binary_true_positives/tp:0"]
    assert type(metric.variables[0]).__name__ == "SyncOnReadVariable"


def test_automatic_names_are_kerass() -> None:
    first, second = metrics.MeanMetricWrapper(np.abs), metrics.MeanMetricWrapper(np.abs)
    assert first.name.startswith("mean_metric_wrapper") and first.name != second.name
    assert metrics.Mean(name=None).name.startswith("mean")


def test_add_variable_takes_kerass_initializers_and_aggregations() -> None:
    metric = metrics.Metric(name="custom")
    ones = metric.add_variable((2,), "ones", dtype="float64", aggregation="mean", name="w")
    given = metric.add_weight(initializer=np.float32(3), name="s")
    made = metric.add_variable(3, lambda shape, dtype: np.full(shape, 2, dtype), name="c")
    assert ones.numpy().tolist() == [1.0, 1.0] and ones.dtype == np.float64
    assert ones.aggregation == A.MEAN and given.aggregation == A.SUM
    assert float(given.numpy()) == 3.0 and made.numpy().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="aggregation"):
        metric.add_variable((), "zeros", aggregation="max")
    with pytest.raises(ValueError, match="initializer"):
        metric.add_variable((), "glorot")
