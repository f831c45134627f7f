"""ElasticHandler's parts in one process: the state's copy, the input remade at a step.

The failure path itself needs Open MPI's ULFM and several ranks: ``tests/e2e/test_elastic.py``;
a MultiWorkerMirroredStrategy (MPI) without it: ``tests/mpi/test_elastic_plain.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import data, distribute, metrics, optimizers, train
from mwms_mpi.distribute import _state_copy
from mwms_mpi.distribute.elastic import ElasticHandler, remake_iterator


class _DuckVariable:
    """A user's variable: only ``assign`` and ``numpy``."""

    def __init__(self, value: Any) -> None:
        self.value = np.array(value)

    def assign(self, value: Any) -> None:
        self.value = np.array(value)

    def numpy(self) -> Any:
        return self.value.copy()


@pytest.fixture
def mirrored() -> distribute.MirroredStrategy:
    return distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def test_a_copy_restores_every_kind_of_state_and_can_be_restored_twice(
    mirrored: distribute.MirroredStrategy,
) -> None:
    with mirrored.scope():
        w = mwms_mpi.Variable(np.arange(3.0), name="w")
        opt = optimizers.Adam(0.1)
        opt.build([w])
    array, duck = np.arange(4.0), _DuckVariable([1.0, 2.0])
    state = train.Checkpoint(w=w, opt=opt, array=array, duck=duck)
    copy = _state_copy.take(state, step=5, position=7)
    assert (copy.step, copy.position) == (5, 7)

    def change() -> None:
        mirrored.run(lambda: opt.apply_gradients([(np.ones(3), w)]))
        array[:] = -1
        duck.assign([9.0, 9.0])

    for _ in range(2):  # a second failure while the step runs again: the same copy again
        change()
        assert opt.iterations.numpy() >= 1 and w.numpy()[0] != 0.0
        _state_copy.restore(state, copy)
        for replica in mirrored.experimental_local_results(w):
            np.testing.assert_array_equal(replica, np.arange(3.0))
        assert opt.iterations.numpy() == 0
        for slot in opt.variables[1:]:
            np.testing.assert_array_equal(slot.numpy(), np.zeros(3))
        np.testing.assert_array_equal(array, np.arange(4.0))
        np.testing.assert_array_equal(duck.numpy(), [1.0, 2.0])


def test_a_copy_is_not_the_live_value(mirrored: distribute.MirroredStrategy) -> None:
    with mirrored.scope():
        w = mwms_mpi.Variable(np.zeros(2), name="w")
    copy = _state_copy.take({"w": w}, 0, 0)
    w.assign_add(np.ones(2))  # in place where the variable allows it: the copy stays
    _state_copy.restore({"w": w}, copy)
    np.testing.assert_array_equal(w.numpy(), np.zeros(2))


def test_a_variable_made_after_the_copy_is_refused_naming_the_fix() -> None:
    w = mwms_mpi.Variable(np.zeros(2), name="w")
    opt = optimizers.SGD(0.1, momentum=0.9)
    state = train.Checkpoint(w=w, opt=opt)
    copy = _state_copy.take(state, 0, 0)
    opt.apply_gradients([(np.ones(2), w)])  # makes the step counter and the momentum slot
    with pytest.raises(RuntimeError, match=r"optimizer\.build"):
        _state_copy.restore(state, copy)


@pytest.mark.parametrize("how", ["dataset", "function"])
def test_the_remade_iterator_goes_on_from_the_position(
    mirrored: distribute.MirroredStrategy, how: str
) -> None:
    rows = np.arange(40.0).reshape(20, 2)
    if how == "dataset":
        made = mirrored.experimental_distribute_dataset(
            data.Dataset.from_tensor_slices(rows).batch(4)
        )
    else:

        def dataset_fn(context: distribute.InputContext) -> data.Dataset:
            size = context.get_per_replica_batch_size(4)
            return data.Dataset.from_tensor_slices(rows).batch(size)

        made = mirrored.distribute_datasets_from_function(dataset_fn)
    reference = [mirrored.experimental_local_results(v) for v in made]
    iterator = iter(made)
    for _ in range(2):
        next(iterator)
    assert iterator._position == 2
    same = iterator
    remake_iterator(iterator, 1)
    assert iterator is same and iterator._position == 1
    rest = [mirrored.experimental_local_results(v) for v in iterator]
    assert len(rest) == len(reference) - 1
    for got, want in zip(rest, reference[1:], strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    remake_iterator(iterator, 3)  # positions count from the original dataset's start
    np.testing.assert_array_equal(
        mirrored.experimental_local_results(next(iterator))[0], reference[3][0]
    )


def test_bad_arguments_are_refused(mirrored: distribute.MirroredStrategy) -> None:
    with pytest.raises(ValueError, match="needs a MultiWorkerMirroredStrategy"):
        ElasticHandler(mirrored, train.Checkpoint())
    with pytest.raises(ValueError, match="min_workers must be at least 1"):
        ElasticHandler(mirrored, train.Checkpoint(), 0)


def test_a_sync_on_read_variable_is_copied_aggregated_and_put_back_as_a_restore_does(
    mirrored: distribute.MirroredStrategy,
) -> None:
    with mirrored.scope():
        total = metrics.Sum(name="total", dtype="float64")
    mirrored.run(lambda: total.update_state(np.float64(3.0)))  # 3 on each of 2 replicas
    state = train.Checkpoint(total=total)
    copy = _state_copy.take(state, 1, 1)
    mirrored.run(lambda: total.update_state(np.float64(5.0)))
    assert float(total.result()) == 16.0
    _state_copy.restore(state, copy)
    assert float(total.result()) == 6.0  # the aggregate, as a checkpoint restore gives it
