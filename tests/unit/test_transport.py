"""The transport decision for device arrays, a pure function of every rank's facts, and the pool.

``transport.decide`` runs on every rank over the same gathered facts; these tests give it the
facts directly (what ranks on GPU nodes would report) and check TF's
``CommunicationImplementation`` rules: AUTO, RING, NCCL's fallback and its refusal of ranks
that share a GPU. The collective part (the gather) is tested under MPI in
``tests/mpi/test_transport_mpi.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mwms_mpi.collective import transport
from mwms_mpi.collective.backends.pinned import PinnedPool, rounded, view
from mwms_mpi.collective.transport import DeviceFacts, decide, shared_gpus

TUNING = (
    transport.DEFAULT_MIN_DEVICE_BYTES,
    transport.DEFAULT_CHUNK_BYTES,
    transport.DEFAULT_PIPELINE_BYTES,
)


def gpu(host: str, bus: str, *, nccl: bool = True, aware: bool = False, n: int = 0) -> DeviceFacts:
    return DeviceFacts(host, n, bus, nccl, aware, 1 if aware else 0, TUNING)


def cpu(host: str = "a", *, aware: bool = False) -> DeviceFacts:
    return DeviceFacts(host, None, None, False, aware, 1 if aware else 0, TUNING)


def test_auto_picks_nccl_when_every_rank_has_its_own_gpu() -> None:
    facts = [gpu("a", "0000:01:00.0"), gpu("a", "0000:02:00.0", n=1), gpu("b", "0000:01:00.0")]
    t = decide("AUTO", facts)
    assert (t.name, t.requested, t.warning) == ("nccl", "AUTO", "")


def test_auto_without_nccl_takes_cuda_aware_mpi_when_every_rank_knows_it() -> None:
    shared = [gpu("a", "0000:01:00.0", aware=True), gpu("a", "0000:01:00.0", aware=True)]
    t = decide("AUTO", shared)
    assert t.name == "cuda_mpi" and "share a GPU" in t.reason
    no_nccl = [gpu("a", "0000:01:00.0", aware=True), gpu("b", "x", nccl=False, aware=True)]
    assert decide("AUTO", no_nccl).name == "cuda_mpi"


def test_auto_stages_unless_every_rank_is_cuda_aware() -> None:
    facts = [gpu("a", "0000:01:00.0", aware=True), gpu("a", "0000:01:00.0", aware=False)]
    t = decide("AUTO", facts)
    assert t.name == "staging" and "rank(s) 1" in t.reason
    assert decide("AUTO", [cpu(), cpu()]).name == "staging"


def test_ring_is_mpi_cuda_aware_if_known_else_staging() -> None:
    own = [gpu("a", "0000:01:00.0", aware=True), gpu("a", "0000:02:00.0", aware=True)]
    assert decide("RING", own).name == "cuda_mpi"  # NCCL possible, but RING means MPI
    assert decide("RING", [gpu("a", "0000:01:00.0")]).name == "staging"


def test_nccl_without_a_gpu_warns_as_tf_and_falls_back_to_ring() -> None:
    t = decide("NCCL", [gpu("a", "0000:01:00.0"), cpu("b")])
    assert t.warning == "Enabled NCCL communication but no GPUs detected/specified."
    assert (t.name, t.requested) == ("staging", "RING")
    assert decide("NCCL", [cpu(aware=True)]).name == "cuda_mpi"


def test_nccl_for_ranks_sharing_a_gpu_is_an_error_naming_them() -> None:
    facts = [gpu("a", "0000:01:00.0"), gpu("b", "0000:01:00.0"), gpu("a", "0000:01:00.0")]
    with pytest.raises(
        ValueError, match=r"ranks 0, 2 share one GPU \(PCI bus 0000:01:00.0 on host a\)"
    ):
        decide("NCCL", facts)


def test_nccl_that_does_not_load_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"NCCL does not load on rank\(s\) 1"):
        decide("NCCL", [gpu("a", "1"), gpu("a", "2", nccl=False)])


def test_nccl_with_a_gpu_each_and_one_rank() -> None:
    assert decide("NCCL", [gpu("a", "0000:01:00.0")]).name == "nccl"
    assert decide("nccl", [gpu("a", "1"), gpu("a", "2")]).name == "nccl"  # any case


def test_shared_gpus_compares_bus_ids_per_host() -> None:
    facts = [gpu("a", "1"), gpu("b", "1"), gpu("a", "2"), cpu("a"), gpu("a", "1")]
    assert shared_gpus(facts) == [("a", "1", [0, 4])]


def test_tuning_must_agree_and_is_carried() -> None:
    a = gpu("a", "1")
    b = a._replace(tuning=(1, 2, 3))
    with pytest.raises(ValueError, match="differently"):
        decide("AUTO", [a, b])
    t = decide("RING", [b._replace(cuda_aware=True)])
    assert (t.min_device_bytes, t.chunk_bytes, t.pipeline_bytes) == (1, 2, 3)


def test_an_error_reading_one_ranks_facts_raises_everywhere() -> None:
    bad = cpu()._replace(error="MWMS_MPI_STAGING_CHUNK_BYTES='x' ...")
    with pytest.raises(ValueError, match="rank 1: MWMS_MPI_STAGING_CHUNK_BYTES"):
        decide("AUTO", [cpu(), bad])


def test_pinned_pool_reuses_given_back_buffers_by_rounded_size() -> None:
    made: list[int] = []

    def allocate(nbytes: int) -> np.ndarray:
        made.append(nbytes)
        return np.empty(nbytes, np.uint8)

    pool = PinnedPool(allocate, max_bytes=1 << 20)
    a = pool.take(1000)
    b = pool.take(70_000)
    assert made == [64 << 10, 128 << 10] and rounded(70_000, 4 << 20) == 128 << 10
    pool.give(a)
    assert pool.take(5) is a  # the same size class comes back
    c = pool.take(5)  # a is out again: a new one
    assert c is not a and pool.allocations == 3
    pool.give(b)
    pool.give(c)
    pool.give(a)
    assert pool.take(100_000) is b
    big = pool.take(2 << 20)
    pool.give(big)  # beyond max_bytes: dropped
    assert pool.take(2 << 20) is not big


def test_pinned_sizes_past_the_chunk_are_multiples_of_it() -> None:
    # Powers of two would pin 512 MB for a 257 MB pack; multiples of the 4 MB chunk pin 260 MB.
    chunk = 4 << 20
    assert rounded(257 << 20, chunk) == 260 << 20
    assert rounded(chunk, chunk) == chunk and rounded(chunk + 1, chunk) == 2 * chunk
    assert rounded(3 << 20, chunk) == chunk  # up to the chunk: powers of two, as before
    assert rounded(100, 64) == 64 << 10  # at least 64 KiB


def test_clearing_the_pinned_pool_gives_the_memory_back() -> None:
    released: list[int] = []
    pool = PinnedPool(lambda n: np.empty(n, np.uint8), release=lambda: released.append(1))
    pool.clear()
    assert released == []  # nothing was pinned: CuPy is not asked (not even imported)
    pool.give(pool.take(1000))
    assert pool.kept_bytes == 64 << 10
    pool.clear()
    assert pool.kept_bytes == 0 and released == [1]


def test_pinned_views_are_typed_prefixes() -> None:
    buffer = np.zeros(64, np.uint8)
    v = view(buffer, (2, 3), np.dtype(np.float32))
    v[...] = 1.5
    assert v.shape == (2, 3) and np.shares_memory(v, buffer)
    assert np.all(buffer[24:] == 0)
