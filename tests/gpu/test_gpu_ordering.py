"""Copies between GPUs are ordered after the work that wrote their source (serial, 2 GPUs).

CUDA runs a copy made under the destination device on the destination's stream, which nothing
orders after the source GPU's queued work: without an event between the two, a replica's
gradient could be read before the kernel (or NCCL call) that writes it has run. Under the fake
CuPy, work queued on a stream runs only when something orders itself after that stream
(``tests/support/fake_streams.py``), so an unordered copy reads the bytes that were there before,
as a GPU may; these tests failed that way before ``_arrays.onto`` waited for an event.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from mwms_mpi import _arrays
from mwms_mpi.distribute import gpus
from tests.gpu.conftest import FAKE


@pytest.fixture
def two_gpus(cp: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    if FAKE:
        from tests.support.fake_cupy import GPUS_ENV

        monkeypatch.setenv(GPUS_ENV, "2")
    elif cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")


def _written_later(cp: types.ModuleType, values: np.ndarray) -> Any:
    """A device-0 array whose contents are written by work still queued on device 0's stream
    (a kernel on a GPU; under the fake, a deferred write), holding -1 until that work runs."""
    with cp.cuda.Device(0):
        array = cp.full(values.shape, -1.0)
        if FAKE:
            from tests.support import fake_streams

            target = array.view(np.ndarray)
            fake_streams.enqueue(fake_streams.current_stream(0), lambda: np.copyto(target, values))
        else:  # on GPUs the race depends on timing: the value and its placement are checked
            array[...] = cp.asarray(values)
    return array


@pytest.mark.usefixtures("two_gpus")
def test_like_onto_another_gpu_waits_for_the_source(cp: types.ModuleType) -> None:
    values = np.arange(6, dtype=np.float64)
    source = _written_later(cp, values)
    with cp.cuda.Device(1):
        reference = cp.zeros(6)
    got = _arrays.like(source, reference)
    assert got.device.id == 1
    np.testing.assert_array_equal(cp.asnumpy(got), values)


@pytest.mark.usefixtures("two_gpus")
def test_placing_a_replica_value_waits_for_the_source(cp: types.ModuleType) -> None:
    values = np.arange(4, dtype=np.float32) + 0.5
    source = _written_later(cp, values)
    placement = gpus.GpuPlacement([0, 1])
    got = placement.place(source, 1)
    assert got.device.id == 1
    np.testing.assert_array_equal(cp.asnumpy(got), values)


@pytest.mark.usefixtures("two_gpus")
def test_per_thread_default_streams_are_refused_with_several_gpu_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(gpus.PER_THREAD_STREAM_ENV, "1")
    devices = [
        "/job:worker/replica:0/task:0/device:GPU:0",
        "/job:worker/replica:0/task:0/device:GPU:1",
    ]
    with pytest.raises(ValueError, match="CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 with 2 GPU"):
        gpus.placement_for(devices)
    assert gpus.placement_for(devices[:1]) is not None  # one replica: no replica threads
