"""Differential scenarios: the same public API calls under real TF 2.21 and under mwms_mpi.

A scenario takes a :class:`Backend` (TF's or ours) and a strategy, makes public API calls and
returns named outcomes in a backend-neutral form (:meth:`Backend.describe`: the kind of object,
dtype and value, or the exception's type). The outcomes TF 2.21 gives are pinned in
``tf_pins.json`` beside this file, written by running this module with TF's Python, outside
the repository's venv (TF is never a dependency of the project or its tests)::

    TF_CPP_MIN_LOG_LEVEL=3 /work/tfvenv/bin/python -m tests.support.differential \\
        --out tests/support/tf_pins.json

(any venv with ``tensorflow-cpu==2.21.0``). ``--scenarios MODULE`` runs another module's
``SCENARIOS`` instead (the ``tests/tf_parity`` files, each with its own pins file).

It runs every scenario under ``MirroredStrategy`` on one and on two logical CPUs, and under
``MultiWorkerMirroredStrategy`` at 1, 2 and 4 workers (one process per worker, a loopback
``TF_CONFIG``) with 1 and 2 local replicas. Two local replicas per worker are two logical CPUs:
TF picks local devices only from GPUs, so the runner replaces
``CollectiveAllReduceExtended._initialize_local_devices`` (the one function that lists them) to
list the CPUs; everything else is TF's own code. The tests run the same scenarios with mwms_mpi
(``tests/unit/test_differential.py``: MirroredStrategy; ``tests/mpi/test_differential.py``: the
strategy fixture at every world size and k) and compare outcome by outcome.

Every scenario runs the same calls on every worker (they are collectives).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

Outcomes = dict[str, Any]
MARK = "DIFFERENTIAL-RESULT "


class Backend:
    """What a scenario needs of TF or of mwms_mpi: the modules, ``constant`` and ``describe``."""

    name: str
    ds: Any  # tf.distribute / mwms_mpi.distribute
    nn: Any
    data: Any
    Variable: Any
    VariableAggregation: Any
    VariableSynchronization: Any

    def constant(self, value: Any, dtype: str | None = None) -> Any:
        raise NotImplementedError

    def describe(self, x: Any) -> Any:
        raise NotImplementedError

    def ctx(self) -> Any:
        """The current replica context."""
        return self.ds.get_replica_context()

    def rid(self) -> float:
        """The current replica's global id as a Python float."""
        return float(self.ctx().replica_id_in_sync_group)

    def outcome(self, fn: Callable[[], Any]) -> Any:
        """``describe(fn())``, or the exception's type name: ``{"raises": "ValueError"}``."""
        try:
            result = fn()
        except Exception as exc:  # every error is an outcome to compare
            return {"raises": type(exc).__name__}
        return self.describe(result)

    # -- helpers of the tests/tf_parity ports (values_test, strategy_common_test, ...) --------

    def indexed_slices(self, values: Any, indices: Any, dense_shape: Any) -> Any:
        """``tf.IndexedSlices`` of constants (TF's tests build them with ``array_ops.identity``)."""
        raise NotImplementedError

    def per_replica(self, values: Any) -> Any:
        """``values.PerReplica(values)``: TF's tests build one directly (no public constructor)."""
        raise NotImplementedError

    def mirrored(self, values: Any) -> Any:
        """``values.Mirrored(values)``, as TF's tests build one directly."""
        raise NotImplementedError

    def reduce_sum(self, x: Any) -> Any:
        """``tf.reduce_sum(x)`` over every axis (a structure of tensors is stacked first)."""
        raise NotImplementedError

    def to_dense(self, x: Any) -> Any:
        """``ops.convert_to_tensor(x)``: an ``IndexedSlices`` scattered into its dense shape."""
        raise NotImplementedError


def _plain(kind: str, x: Any) -> Any:
    if isinstance(x, bool | int | float | str) or x is None:
        return {"type": kind, "value": x}
    return {"type": kind}


def _array(kind: str, array: np.ndarray) -> dict[str, Any]:
    if array.dtype.kind == "c":  # JSON has no complex numbers: [real, imaginary] pairs
        value = np.stack([array.real, array.imag], axis=-1).tolist()
    else:
        value = array.tolist()
    return {"type": kind, "dtype": array.dtype.name, "value": value}


def _slices(values: np.ndarray, indices: np.ndarray) -> dict[str, Any]:
    return {
        "type": "IndexedSlices",
        "values": _array("Tensor", values),
        "indices": _array("Tensor", indices),
    }


class OursBackend(Backend):
    """mwms_mpi: ``tf.constant(x)`` read as a numpy array."""

    name = "mwms_mpi"

    def __init__(self) -> None:
        import mwms_mpi
        import mwms_mpi.data
        import mwms_mpi.distribute
        import mwms_mpi.nn
        from mwms_mpi.values.convert import as_array

        self.ds = mwms_mpi.distribute
        self.nn = mwms_mpi.nn
        self.data = mwms_mpi.data
        self.Variable = mwms_mpi.Variable
        self.VariableAggregation = mwms_mpi.VariableAggregation
        self.VariableSynchronization = mwms_mpi.VariableSynchronization
        self._as_array = as_array
        self._mwms = mwms_mpi

    def constant(self, value: Any, dtype: str | None = None) -> Any:
        array = self._as_array(value)
        return np.array(array, dtype=dtype) if dtype is not None else np.array(array)

    def describe(self, x: Any) -> Any:
        from mwms_mpi.values import DistributedValues, IndexedSlices, Variable
        from mwms_mpi.values.variables import UnreadVariable

        if isinstance(x, DistributedValues):
            return {"type": type(x).__name__, "values": [self.describe(v) for v in x.values]}
        if isinstance(x, UnreadVariable):
            return _array("UnreadVariable", x.read_value())
        if isinstance(x, Variable):
            return _array("Variable", x.read_value())
        if isinstance(x, np.ndarray | np.generic):
            return _array("Tensor", np.asarray(x))
        if isinstance(x, IndexedSlices):
            return _slices(np.asarray(x.values), np.asarray(x.indices))
        return _describe_python(self, x)

    def indexed_slices(self, values: Any, indices: Any, dense_shape: Any) -> Any:
        return self._mwms.IndexedSlices(
            self.constant(values), self.constant(indices), self.constant(dense_shape)
        )

    def per_replica(self, values: Any) -> Any:
        return self.ds.PerReplica(values)

    def mirrored(self, values: Any) -> Any:
        return self.ds.Mirrored(values)

    def reduce_sum(self, x: Any) -> Any:
        return np.sum(np.asarray(self._as_array(x)))

    def to_dense(self, x: Any) -> Any:
        from mwms_mpi.values import IndexedSlices

        if not isinstance(x, IndexedSlices):
            return np.asarray(self._as_array(x))
        dense = np.zeros(tuple(np.asarray(x.dense_shape).tolist()), np.asarray(x.values).dtype)
        np.add.at(dense, np.asarray(x.indices), np.asarray(x.values))
        return dense


def _describe_python(backend: Backend, x: Any) -> Any:
    if isinstance(x, list | tuple):
        return {"type": type(x).__name__, "items": [backend.describe(v) for v in x]}
    if isinstance(x, dict):
        return {"type": "dict", "items": {str(k): backend.describe(v) for k, v in x.items()}}
    return _plain(type(x).__name__, x)


class TFBackend(Backend):
    """Real TensorFlow (only in the scratch venv that writes the pins)."""

    name = "tf"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self.ds = tf.distribute
        self.nn = tf.nn
        self.data = tf.data
        self.Variable = tf.Variable
        self.VariableAggregation = tf.VariableAggregation
        self.VariableSynchronization = tf.VariableSynchronization

    def constant(self, value: Any, dtype: str | None = None) -> Any:
        return self.tf.constant(value, dtype=dtype)

    def describe(self, x: Any) -> Any:
        tf = self.tf
        if isinstance(x, tf.distribute.DistributedValues):
            return {"type": type(x).__name__, "values": [self.describe(v) for v in x.values]}
        if isinstance(x, tf.Variable):
            kind = "UnreadVariable" if type(x).__name__ == "_UnreadVariable" else "Variable"
            return _array(kind, np.asarray(x.numpy()))
        if isinstance(x, tf.IndexedSlices):
            return _slices(x.values.numpy(), x.indices.numpy())
        if isinstance(x, tf.Tensor):
            return _array("Tensor", np.asarray(x.numpy()))
        if isinstance(x, np.ndarray):
            return _array("ndarray", x)
        return _describe_python(self, x)

    def indexed_slices(self, values: Any, indices: Any, dense_shape: Any) -> Any:
        tf = self.tf
        return tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant(dense_shape))

    def per_replica(self, values: Any) -> Any:
        from tensorflow.python.distribute import values as tf_values

        return tf_values.PerReplica(values)

    def mirrored(self, values: Any) -> Any:
        from tensorflow.python.distribute import values as tf_values

        return tf_values.Mirrored(values)

    def reduce_sum(self, x: Any) -> Any:
        return self.tf.reduce_sum(x)

    def to_dense(self, x: Any) -> Any:
        return self.tf.convert_to_tensor(x)


# -- the scenarios ------------------------------------------------------------------------------


def updates(b: Backend, s: Any) -> Outcomes:
    """What updates return: ``assign*`` in either context, ``extended.update``, ``merge_call``."""
    o: Outcomes = {}
    A = b.VariableAggregation
    with s.scope():
        v = b.Variable(1.0)
    o["assign"] = b.outcome(lambda: v.assign(2.0))
    o["assign_add"] = b.outcome(lambda: v.assign_add(1.0))
    o["assign_sub"] = b.outcome(lambda: v.assign_sub(1.0))
    o["assign_read_value_false"] = b.outcome(lambda: v.assign(2.0, read_value=False))
    o["assign_add_read_value_false"] = b.outcome(lambda: v.assign_add(2.0, read_value=False))
    with s.scope():
        o["assign_in_scope"] = b.outcome(lambda: v.assign(5.0))
    up = s.extended.update
    o["update"] = b.outcome(lambda: up(v, lambda c, x: c.assign_add(x), args=(1.0,)))
    o["update_group_false"] = b.outcome(
        lambda: up(v, lambda c, x: c.assign_add(x), args=(1.0,), group=False)
    )
    o["update_tensor"] = b.outcome(lambda: up(v, lambda c, x: c.read_value() + x, args=(1.0,)))
    o["update_tensor_group_false"] = b.outcome(
        lambda: up(v, lambda c, x: c.read_value() + x, args=(1.0,), group=False)
    )
    o["update_none"] = b.outcome(lambda: up(v, lambda c, x: None, args=(1.0,)))
    o["update_same_int"] = b.outcome(lambda: up(v, lambda c, x: 3, args=(1.0,)))
    o["update_distinct_floats"] = b.outcome(
        lambda: up(v, lambda c, x: float(c.numpy()) + 0.5, args=(1.0,))
    )
    o["update_list"] = b.outcome(lambda: up(v, lambda c, x: [c.read_value(), 2], args=(1.0,)))
    r = v.assign(10.0)
    v.assign(11.0)
    o["assign_read_later"] = b.describe(r)
    r = up(v, lambda c, x: c.assign(x), args=(12.0,))
    v.assign(13.0)
    o["update_read_later"] = b.describe(r)
    devices = tuple(s.extended.worker_devices)
    o["update_non_slot"] = b.outcome(
        lambda: s.extended.update_non_slot(devices, lambda: b.constant(1.0))
    )
    o["update_non_slot_group_false"] = b.outcome(
        lambda: s.extended.update_non_slot(devices, lambda: b.constant(1.0), group=False)
    )

    def merge_update() -> Any:
        return b.ctx().merge_call(
            lambda st: st.extended.update(v, lambda c, x: c.assign(x), args=(7.0,))
        )

    o["merge_call_update"] = b.outcome(lambda: s.run(merge_update))
    o["merge_call_assign"] = b.outcome(
        lambda: s.run(lambda: b.ctx().merge_call(lambda st: v.assign(8.0)))
    )
    o["update_in_replica_context"] = b.outcome(
        lambda: s.run(lambda: up(v, lambda c, x: c.assign(x), args=(9.0,)))
    )
    o["update_in_replica_context_tensor"] = b.outcome(
        lambda: s.run(lambda: up(v, lambda c, x: c.read_value() * 0.0 + x, args=(9.0,)))
    )
    with s.scope():
        w = b.Variable(0.0, aggregation=A.SUM)
        n = b.Variable(0.0)
        m = b.Variable(0.0, aggregation=A.MEAN)
        f = b.Variable(0.0, aggregation=A.ONLY_FIRST_REPLICA)
    o["replica_assign_add_sum"] = b.outcome(
        lambda: s.run(lambda: w.assign_add(b.constant(b.rid() + 1.0)))
    )
    o["replica_assign_add_sum_after"] = b.outcome(w.read_value)
    o["replica_assign_none"] = b.outcome(lambda: s.run(lambda: n.assign(b.constant(b.rid() + 1.0))))
    o["replica_assign_none_after"] = b.describe(list(s.experimental_local_results(n)))
    o["replica_assign_mean"] = b.outcome(lambda: s.run(lambda: m.assign(b.constant(b.rid() + 1.0))))
    o["replica_assign_only_first"] = b.outcome(
        lambda: s.run(lambda: f.assign_add(b.constant(b.rid() + 1.0)))
    )
    o["replica_assign_read_value_false"] = b.outcome(
        lambda: s.run(lambda: w.assign_add(b.constant(1.0), read_value=False))
    )
    o["replica_assign_same_python_value"] = b.outcome(lambda: s.run(lambda: w.assign_add(1.0)))
    o["replica_assign_same_python_value_mean"] = b.outcome(lambda: s.run(lambda: m.assign(1.0)))
    return o


def sync_on_read(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariable writes and reads in both contexts (integer division included)."""
    o: Outcomes = {}
    A, S = b.VariableAggregation, b.VariableSynchronization
    with s.scope():
        r = b.Variable(0.0, synchronization=S.ON_READ, aggregation=A.SUM)
        i = b.Variable(0, synchronization=S.ON_READ, aggregation=A.SUM)
        q = b.Variable(0.0, synchronization=S.ON_READ, aggregation=A.MEAN)
    o["replica_assign"] = b.outcome(lambda: s.run(lambda: r.assign(b.constant(b.rid() + 1.0))))
    o["cross_replica_read"] = b.outcome(r.read_value)
    o["cross_replica_assign"] = b.outcome(lambda: r.assign(4.0))
    o["cross_replica_assign_components"] = b.describe(list(s.experimental_local_results(r)))
    o["cross_replica_assign_add_sum"] = b.outcome(lambda: r.assign_add(1.0))
    o["int_cross_replica_assign"] = b.outcome(lambda: i.assign(5))
    o["int_components"] = b.describe(list(s.experimental_local_results(i)))
    o["mean_replica_assign"] = b.outcome(lambda: s.run(lambda: q.assign(b.constant(b.rid()))))
    o["mean_cross_replica_read"] = b.outcome(q.read_value)
    o["mean_cross_replica_assign_add"] = b.outcome(lambda: q.assign_add(1.0))
    o["mean_reduce"] = b.outcome(lambda: s.reduce("MEAN", q, axis=None))
    return o


def reduce_corners(b: Backend, s: Any) -> Outcomes:
    """Short-circuits of reduce/reduce_to on values that are not per-replica, and context ids."""
    o: Outcomes = {}
    e = s.extended
    zero, one = b.constant(0.0), b.constant(1.0)
    for op in ("SUM", "MEAN"):
        o[f"reduce_to_{op}_tensor_zero"] = b.outcome(lambda op=op: e.reduce_to(op, zero, zero))
        o[f"reduce_to_{op}_tensor_one"] = b.outcome(lambda op=op: e.reduce_to(op, one, one))
        o[f"reduce_to_{op}_tensor_zero_device"] = b.outcome(
            lambda op=op: e.reduce_to(op, zero, "/cpu:0")
        )
        o[f"reduce_to_{op}_python_zero"] = b.outcome(lambda op=op: e.reduce_to(op, 0.0, "/cpu:0"))
        o[f"reduce_{op}_tensor_zero"] = b.outcome(lambda op=op: s.reduce(op, zero, axis=None))
        o[f"reduce_{op}_tensor_one"] = b.outcome(lambda op=op: s.reduce(op, one, axis=None))
        o[f"batch_reduce_to_{op}_tensor_zero"] = b.outcome(
            lambda op=op: e.batch_reduce_to(op, [(zero, zero)])
        )
    with s.scope():
        v = b.Variable(3.0)
    pr = s.run(lambda: b.constant(b.rid() + 1.0))
    m = e.reduce_to("SUM", pr, pr)
    o["reduced_to_mirrored"] = b.describe(m)
    first = s.experimental_local_results(m)[0]
    result = s.reduce("MEAN", m, axis=None)
    o["reduce_mean_mirrored"] = b.describe(result)
    if isinstance(m, b.ds.DistributedValues):  # a plain array is copied here (never aliased)
        o["reduce_mean_mirrored_is_first_component"] = result is first
        o["reduce_to_mean_mirrored_is_value"] = e.reduce_to("MEAN", m, m) is m
    o["reduce_to_sum_mirrored"] = b.outcome(lambda: e.reduce_to("SUM", m, m))
    result = s.reduce("MEAN", v, axis=None)
    o["reduce_mean_mirrored_variable"] = b.describe(result)
    o["reduce_mean_mirrored_variable_is_primary"] = result is s.experimental_local_results(v)[0]
    o["reduce_to_mean_mirrored_variable_is_variable"] = e.reduce_to("MEAN", v, v) is v
    o["reduce_sum_mirrored_variable"] = b.outcome(lambda: s.reduce("SUM", v, axis=None))
    o["replica_id_in_run"] = b.outcome(lambda: s.run(lambda: b.ctx().replica_id_in_sync_group))
    o["default_replica_id"] = b.describe(b.ds.get_replica_context().replica_id_in_sync_group)
    o["default_num_replicas"] = b.describe(b.ds.get_replica_context().num_replicas_in_sync)
    return o


def _sample(b: Backend, dtype: str) -> Any:
    """A new ``[1, 2]`` (bools: ``[True, False]``) of ``dtype``, as a replica function makes it."""
    return b.constant([True, False] if dtype == "bool" else [1, 2], dtype=dtype)


DIVISION_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "float16", "float64", "bool")


def division(b: Backend, s: Any) -> Outcomes:
    """MEAN of integers, bools and small floats through every public reduction path."""
    o: Outcomes = {}
    e = s.extended
    for dtype in DIVISION_DTYPES:
        pr = s.run(lambda dtype=dtype: _sample(b, dtype))
        o[f"reduce_{dtype}"] = b.outcome(lambda pr=pr: s.reduce("MEAN", pr, axis=None))
        o[f"reduce_axis0_{dtype}"] = b.outcome(lambda pr=pr: s.reduce("MEAN", pr, axis=0))
        o[f"reduce_to_{dtype}"] = b.outcome(lambda pr=pr: e.reduce_to("MEAN", pr, pr))
        o[f"batch_reduce_to_{dtype}"] = b.outcome(
            lambda pr=pr: e.batch_reduce_to("MEAN", [(pr, pr)])
        )
        o[f"all_reduce_{dtype}"] = b.outcome(
            lambda dtype=dtype: s.run(lambda: b.ctx().all_reduce("MEAN", _sample(b, dtype)))
        )
        host = _sample(b, dtype)
        o[f"reduce_host_{dtype}"] = b.outcome(lambda host=host: s.reduce("MEAN", host, axis=None))
    return o


COLLECTIVE_DTYPES = ("int8", "uint8", "int16", "uint16", "int64", "complex64", "bool")


def collective_dtypes(b: Backend, s: Any) -> Outcomes:
    """Which dtypes SUM reductions and gathers take (TF's collective kernels are picky)."""
    o: Outcomes = {}
    e = s.extended
    for dtype in COLLECTIVE_DTYPES:
        pr = s.run(lambda dtype=dtype: _sample(b, dtype))
        o[f"reduce_{dtype}"] = b.outcome(lambda pr=pr: s.reduce("SUM", pr, axis=None))
        o[f"batch_reduce_to_{dtype}"] = b.outcome(
            lambda pr=pr: e.batch_reduce_to("SUM", [(pr, pr)])
        )
        o[f"gather_{dtype}"] = b.outcome(lambda pr=pr: s.gather(pr, axis=0))
        o[f"all_gather_{dtype}"] = b.outcome(
            lambda dtype=dtype: s.run(lambda: b.ctx().all_gather(_sample(b, dtype), axis=0))
        )
    return o


def old_names(b: Backend, s: Any) -> Outcomes:
    """The TF 1.x / early TF 2 names TF 2.21 still has, and the ``tf.nn`` loss helpers."""
    with warnings.catch_warnings():  # the deprecation warnings are tested on their own
        warnings.simplefilter("ignore", DeprecationWarning)
        return _old_names(b, s)


def _old_names(b: Backend, s: Any) -> Outcomes:
    o: Outcomes = {}

    def batches(it: Any, count: int = 2) -> list[Any]:
        return [it.get_next() for _ in range(count)]

    o["make_dataset_iterator"] = b.outcome(
        lambda: batches(s.make_dataset_iterator(b.data.Dataset.range(16).batch(4)))
    )
    o["make_dataset_iterator_initialize"] = b.outcome(
        lambda: s.make_dataset_iterator(b.data.Dataset.range(8).batch(4)).initialize()
    )

    def input_fn(ctx: Any) -> Any:
        shard = b.data.Dataset.range(32).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return shard.batch(2)

    o["make_input_fn_iterator"] = b.outcome(lambda: batches(s.make_input_fn_iterator(input_fn)))
    o["make_input_fn_iterator_per_replica"] = b.outcome(
        lambda: s.make_input_fn_iterator(input_fn, b.ds.InputReplicationMode.PER_REPLICA)
    )
    o["experimental_run"] = b.outcome(
        lambda: s.experimental_run(
            lambda x: x * 2, s.make_dataset_iterator(b.data.Dataset.range(8).batch(4))
        )
    )
    o["experimental_run_no_iterator"] = b.outcome(lambda: s.experimental_run(lambda: 5))
    o["experimental_distribute_datasets_from_function"] = b.outcome(
        lambda: next(iter(s.experimental_distribute_datasets_from_function(input_fn)))
    )
    o["configure_nothing"] = b.outcome(lambda: s.configure())
    o["unwrap"] = b.outcome(lambda: s.unwrap(s.run(lambda: b.constant(1.0))))
    o["collective_communication_is_implementation"] = (
        b.ds.experimental.CollectiveCommunication is b.ds.experimental.CommunicationImplementation
    )
    nn = b.nn
    losses = [1.0, 2.0, 3.0]
    o["compute_average_loss"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses)))
    )
    o["compute_average_loss_weighted"] = b.outcome(
        lambda: s.run(
            lambda: nn.compute_average_loss(
                b.constant(losses), sample_weight=b.constant([1.0, 0.0, 2.0])
            )
        )
    )
    o["compute_average_loss_scalar_weight"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses), sample_weight=0.5))
    )
    o["compute_average_loss_column_weight"] = b.outcome(
        lambda: s.run(
            lambda: nn.compute_average_loss(
                b.constant(losses), sample_weight=b.constant([[1.0], [2.0], [3.0]])
            )
        )
    )
    o["compute_average_loss_global_batch"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses), global_batch_size=4))
    )
    o["compute_average_loss_zero_batch"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses), global_batch_size=0))
    )
    o["compute_average_loss_float_batch"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses), global_batch_size=4.0))
    )
    o["compute_average_loss_negative_batch"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses), global_batch_size=-1))
    )
    o["compute_average_loss_float64"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(losses, dtype="float64")))
    )
    o["compute_average_loss_matrix"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant([[1.0, 2.0], [3.0, 4.0]])))
    )
    o["compute_average_loss_rank0"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant(1.0)))
    )
    o["compute_average_loss_empty"] = b.outcome(
        lambda: s.run(lambda: nn.compute_average_loss(b.constant([], dtype="float32")))
    )

    def cross_replica_loss() -> Any:
        with s.scope():
            return nn.compute_average_loss(b.constant(losses))

    o["compute_average_loss_cross_replica"] = b.outcome(cross_replica_loss)
    o["compute_average_loss_default_strategy"] = b.outcome(
        lambda: nn.compute_average_loss(b.constant(losses))
    )
    o["scale_regularization_loss"] = b.outcome(
        lambda: s.run(lambda: nn.scale_regularization_loss(b.constant([1.0, 3.0])))
    )
    o["scale_regularization_loss_scalar"] = b.outcome(
        lambda: s.run(lambda: nn.scale_regularization_loss(b.constant(2.0)))
    )

    def cross_replica_regularization() -> Any:
        with s.scope():
            return nn.scale_regularization_loss(b.constant(2.0))

    o["scale_regularization_loss_cross_replica"] = b.outcome(cross_replica_regularization)
    return o


SCENARIOS: dict[str, Callable[[Backend, Any], Outcomes]] = {
    "updates": updates,
    "sync_on_read": sync_on_read,
    "reduce_corners": reduce_corners,
    "division": division,
    "collective_dtypes": collective_dtypes,
    "old_names": old_names,
}


Scenarios = dict[str, Callable[[Backend, Any], Outcomes]]


def run_scenarios(b: Backend, s: Any, scenarios: Scenarios | None = None) -> dict[str, Outcomes]:
    """Every scenario's outcomes, in a fixed order (the same calls on every worker)."""
    chosen = SCENARIOS if scenarios is None else scenarios
    return {name: scenario(b, s) for name, scenario in chosen.items()}


def scenarios_of(module: str) -> Scenarios:
    """The ``SCENARIOS`` of a scenario module (this one, or a ``tests/tf_parity`` file)."""
    found: Scenarios = importlib.import_module(module).SCENARIOS
    return found


# -- comparing ------------------------------------------------------------------------------------


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected`` (floats to float32 precision)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(expected) | set(actual), key=str):
            if key not in actual:
                out.append(f"{where}/{key}: missing (TF: {expected[key]!r})")
            elif key not in expected:
                out.append(f"{where}/{key}: not in TF's outcomes ({actual[key]!r})")
            else:
                out.extend(differences(expected[key], actual[key], f"{where}/{key}"))
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        out = []
        for i, (x, y) in enumerate(zip(expected, actual, strict=True)):
            out.extend(differences(x, y, f"{where}[{i}]"))
        return out
    if _close(expected, actual):
        return []
    return [f"{where}: TF {expected!r}, mwms_mpi {actual!r}"]


def _close(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float | int) and not isinstance(y, bool):
        return bool(np.isclose(x, y, rtol=1e-6, atol=0.0, equal_nan=True))
    return type(x) is type(y) and x == y


def pinned(config: str, task: int, path: str | None = None) -> dict[str, Outcomes]:
    """TF's outcomes for ``config`` (e.g. ``"mwms_n2_k1"``) on worker ``task``, from ``path``
    (default: ``tf_pins.json`` beside this module)."""
    path = path or os.path.join(os.path.dirname(__file__), "tf_pins.json")
    with open(path, encoding="utf-8") as f:
        everything = json.load(f)
    if config not in everything:  # the same on every rank: it depends on the world size only
        pytest.skip(f"TF 2.21 was run at {', '.join(sorted(everything))} only, not {config}")
    tasks = everything[config]
    result = tasks[0]
    if task:
        result = {name: dict(result[name], **tasks[task].get(name, {})) for name in result}
    return result


def _compact(per_task: list[dict[str, Outcomes]]) -> list[dict[str, Outcomes]]:
    """Task 0's outcomes in full; for the others only those that differ from task 0's."""
    first = per_task[0]
    out = [first]
    for other in per_task[1:]:
        out.append(
            {
                name: {k: v for k, v in outcomes.items() if first[name].get(k) != v}
                for name, outcomes in other.items()
                if outcomes != first[name]
            }
        )
    return out


# -- the TF runner ------------------------------------------------------------------------------

CONFIGS = ["mirrored_k1", "mirrored_k2"] + [f"mwms_n{n}_k{k}" for n in (1, 2, 4) for k in (1, 2)]


def _tf_strategy(config: str, index: int, port: int) -> Any:
    import tensorflow as tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    k = int(config.rsplit("_k", 1)[1])
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
    if config.startswith("mirrored"):
        return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(k)])

    def local_devices(self: Any, resolver: Any, worker_device: str) -> Any:
        return tuple(f"{worker_device}/device:CPU:{i}" for i in range(k)), "CPU"

    cars.CollectiveAllReduceExtended._initialize_local_devices = local_devices
    return tf.distribute.MultiWorkerMirroredStrategy()


def _run_tf_task(config: str, index: int, port: int, module: str) -> None:
    n = int(config.split("_n")[1].split("_")[0]) if config.startswith("mwms") else 1
    if config.startswith("mwms") and n > 1:
        addresses = [f"127.0.0.1:{port + i}" for i in range(n)]
        os.environ["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
        )
    strategy = _tf_strategy(config, index, port)
    results = run_scenarios(TFBackend(), strategy, scenarios_of(module))
    print(MARK + json.dumps(results), flush=True)


def _free_port_block(count: int) -> int:
    for base in range(23500, 30000, 16):
        try:
            sockets = []
            for i in range(count):
                sock = socket.socket()
                sock.bind(("127.0.0.1", base + i))
                sockets.append(sock)
            for sock in sockets:
                sock.close()
            return base
        except OSError:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free port block")


def _collect(config: str, module: str) -> list[dict[str, Outcomes]]:
    n = int(config.split("_n")[1].split("_")[0]) if config.startswith("mwms") else 1
    port = _free_port_block(n)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.differential",
                "--scenarios",
                module,
                "--task",
                config,
                str(i),
                str(port),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    per_task = []
    for i, proc in enumerate(procs):
        stdout, _ = proc.communicate(timeout=900)
        lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{config} task {i} failed (exit {proc.returncode})")
        per_task.append(json.loads(lines[-1][len(MARK) :]))
    return per_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Writes TF 2.21's outcomes of the scenarios.")
    parser.add_argument("--out", help="the pins file to write")
    parser.add_argument("--configs", nargs="*", default=CONFIGS)
    parser.add_argument(
        "--scenarios",
        default=__name__ if __name__ != "__main__" else "tests.support.differential",
        help="the module whose SCENARIOS to run (e.g. tests.tf_parity.test_values)",
    )
    parser.add_argument("--task", nargs=3, metavar=("CONFIG", "INDEX", "PORT"))
    args = parser.parse_args(argv)
    if args.task:
        config, index, port = args.task
        _run_tf_task(config, int(index), int(port), args.scenarios)
        return 0
    pins = {}
    for config in args.configs:
        print(f"running {config}", file=sys.stderr, flush=True)
        pins[config] = _compact(_collect(config, args.scenarios))
    text = json.dumps(pins, indent=None, sort_keys=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
