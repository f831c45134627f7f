"""MPIClusterResolver at any world size, checked on every rank against facts gathered from all."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from mwms_mpi._mpi import mpi
from mwms_mpi.cluster import multi_worker_util as mwu
from mwms_mpi.cluster.mpi import check_mpi_world
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from mwms_mpi.train import ClusterSpec
from tests.support.mpi import all_ranks_ok

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def comm() -> Iterator[Any]:
    """This module's own duplicate of COMM_WORLD (one per module, freed at the end)."""
    c = mpi().COMM_WORLD.Dup()
    yield c
    c.Free()


@pytest.fixture(scope="module")
def world(comm: Any) -> list[tuple[int, str]]:
    """(rank, host) of every rank, gathered independently of the resolver."""
    return [tuple(x) for x in comm.allgather((comm.Get_rank(), mpi().Get_processor_name()))]


def reference(world: list[tuple[int, str]], base_port: int) -> tuple[list[str], list[int]]:
    """Serial reference: every rank's address and node-local rank (rank order within a host)."""
    local = [sum(1 for _, h2 in world[:i] if h2 == host) for i, (_, host) in enumerate(world)]
    return [f"{host}:{base_port + lr}" for (_, host), lr in zip(world, local, strict=True)], local


def all_equal(comm: Any, value: object) -> bool:
    values = comm.allgather(value)
    return all(v == values[0] for v in values)


def test_world_ranks_are_workers(comm: Any, world: list[tuple[int, str]]) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    addresses, local = reference(world, 8888)
    r = MPIClusterResolver()
    assert (r.rank, r.world_size, r.hosts) == (rank, size, [h for _, h in world])
    assert (r.task_type, r.task_id) == ("worker", rank)
    assert r.cluster_spec() == ClusterSpec({"worker": addresses})
    assert r.cluster_spec().as_dict() == {"worker": addresses}
    assert r.node_local_rank == local[rank]
    assert r.node_local_size == sum(1 for _, h in world if h == world[rank][1])
    assert r.master() == addresses[rank]
    assert r.master("worker", 0, rpc_layer="grpc") == f"grpc://{addresses[0]}"
    assert (r.environment, r.rpc_layer) == ("", None)
    spec = r.cluster_spec()
    assert mwu.id_in_cluster(spec, r.task_type, r.task_id) == rank
    assert mwu.is_chief(spec, r.task_type, r.task_id) is (rank == 0)
    assert mwu.worker_count(spec, r.task_type) == size
    assert all_equal(comm, r.cluster_spec().as_dict())
    assert len(set(addresses)) == size  # node-local ports keep addresses unique


def test_chief(comm: Any, world: list[tuple[int, str]]) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    addresses, _ = reference(world, 9000)
    r = MPIClusterResolver(chief=True, base_port=9000, rpc_layer="grpc")
    expected = {"chief": addresses[:1]}
    if size > 1:
        expected["worker"] = addresses[1:]
    assert r.cluster_spec().as_dict() == expected
    assert (r.task_type, r.task_id) == (("chief", 0) if rank == 0 else ("worker", rank - 1))
    assert r.master() == f"grpc://{addresses[rank]}"
    spec = r.cluster_spec()
    assert mwu.id_in_cluster(spec, r.task_type, r.task_id) == rank
    assert mwu.is_chief(spec, r.task_type, r.task_id) is (rank == 0)
    assert mwu.worker_count(spec, r.task_type) == size
    assert mwu.collective_leader(spec, r.task_type, r.task_id) == "/job:chief/replica:0/task:0"


def test_num_accelerators(comm: Any) -> None:
    assert MPIClusterResolver(num_accelerators={"CPU": 2}).num_accelerators() == {"CPU": 2}
    gpu = MPIClusterResolver(num_accelerators={"GPU": 1})
    assert gpu.num_accelerators() == {"GPU": 1}
    default = MPIClusterResolver().num_accelerators()
    if importlib.util.find_spec("cupy") is None:
        assert default == {}
    else:
        assert set(default) <= {"GPU"}
    with pytest.raises(ValueError, match="got 'GPU': -1"):
        MPIClusterResolver(num_accelerators={"GPU": -1})  # refused before any collective


def test_sub_communicator(comm: Any, world: list[tuple[int, str]]) -> None:
    rank = comm.Get_rank()
    sub = comm.Split(rank % 2, rank)
    try:
        r = MPIClusterResolver(comm=sub)
        members = [w for w in world if w[0] % 2 == rank % 2]
        addresses, _ = reference(members, 8888)
        assert (r.rank, r.world_size) == (sub.Get_rank(), len(members))
        assert r.cluster_spec().as_dict() == {"worker": addresses}
        assert (r.task_type, r.task_id) == ("worker", rank // 2)
    finally:
        sub.Free()


def test_resolver_state_is_fixed_after_construction(
    comm: Any, world: list[tuple[int, str]]
) -> None:
    r = MPIClusterResolver()
    given = MPIClusterResolver(num_accelerators={"CPU": 3})
    addresses, _ = reference(world, 8888)
    # No further collectives: only rank 0 asks, and nothing hangs; the answers are the
    # independently gathered facts, and a caller's edit of a returned dict changes nothing.
    problems = []
    if comm.Get_rank() == 0:
        if r.cluster_spec() != ClusterSpec({"worker": addresses}):
            problems.append(f"cluster_spec {r.cluster_spec()}, expected {addresses}")
        asked = given.num_accelerators()
        asked["CPU"] = 1
        if given.num_accelerators() != {"CPU": 3}:
            problems.append(f"num_accelerators {given.num_accelerators()}, given {{'CPU': 3}}")
        if importlib.util.find_spec("cupy") is None and r.num_accelerators() != {}:
            problems.append(f"num_accelerators {r.num_accelerators()} without CuPy")
    r.task_type, r.task_id = "chief", 0  # settable, as on every ClusterResolver
    assert (r.task_type, r.task_id) == ("chief", 0)
    assert all_ranks_ok(comm, not problems), problems


def test_launcher_agrees_with_world() -> None:
    check_mpi_world()  # the launcher's variables match COMM_WORLD: no error
