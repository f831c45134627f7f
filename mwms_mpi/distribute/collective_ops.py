"""TF's CollectiveAllReduce: the cross-device ops of MultiWorkerMirroredStrategy, over MPI.

TF's collective group of replicas, with TF's collective kernels' dtypes. It owns the
``Communicator`` across workers (``None`` for one worker) and makes ONE collective call per
value (one per pack for a batch) from the thread that owns it, after summing the local
replicas into the buffer it reduces. ``MEAN`` divides that sum by the group size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mwms_mpi._config import switches
from mwms_mpi.collective import Communicator, Op
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.distribute import cross_device_utils as utils
from mwms_mpi.distribute.cross_device_ops import CrossDeviceOps
from mwms_mpi.types import CommunicationOptions, ReduceOp
from mwms_mpi.values import IndexedSlices
from mwms_mpi.values.convert import as_array


class CollectiveAllReduce(CrossDeviceOps):
    """All-reduce across a group of replicas: this worker's, summed in-process, then MPI.

    TF's collective group, with TF's collective kernels' dtypes. With a communicator of more
    than one rank, each value (each pack of a batch) is ONE collective call, made after the
    local replicas are summed into the buffer it reduces.

    Args:
      devices: this worker's devices taking part (one value per device is reduced).
      group_size: the number of replicas in the whole group (devices x workers); MEAN
        divides by it.
      options: default ``CommunicationOptions`` (the communicator holds the same defaults).
      communicator: the ``Communicator`` across workers; ``None`` for a single worker.

    Raises:
      ValueError: if ``group_size`` is not a multiple of the number of devices.
    """

    def __init__(
        self,
        devices: Sequence[str],
        group_size: int,
        options: CommunicationOptions | None = None,
        communicator: Communicator | None = None,
    ) -> None:
        if group_size % len(devices) != 0:
            raise ValueError("group_size must be divisible by the number of devices.")
        self._devices = tuple(devices)
        self._group_size = group_size
        self._options = options or CommunicationOptions()
        multi = communicator is not None and communicator.size > 1
        self._communicator = communicator if multi else None
        self._num_between_graph_workers = group_size // len(devices)

    def reduce_implementation(
        self,
        reduce_op: ReduceOp,
        per_replica_value: Any,
        destinations: Any,
        options: CommunicationOptions | None,
    ) -> Any:
        """One collective call for the value (sparse: a gather of values and indices)."""
        values = utils.local_values(per_replica_value)
        comm = self._communicator
        if comm is None or type(values[0]) is IndexedSlices:
            (result,) = self._reduce_values(reduce_op, [values], options)
        else:  # the usual case (a dense step result), without a batch's bookkeeping
            result = _dense_across_workers(comm, values, options, reduce_op, self._group_size)
        return utils.mirror(result, destinations)

    def batch_reduce_implementation(
        self,
        reduce_op: ReduceOp,
        value_destination_pairs: Sequence[tuple[Any, Any]],
        options: CommunicationOptions | None,
    ) -> list[Any]:
        """Dense values in one packed collective call per pack; sparse ones gathered."""
        if type(value_destination_pairs) is utils.ArrayPairs:  # a k = 1 step's gradients:
            # each value its own one local value, each result its own destination
            per_array = [(value,) for value, _ in value_destination_pairs]
            return self._reduce_values(reduce_op, per_array, options)
        local_values = utils.local_values
        per_value = [local_values(value) for value, _ in value_destination_pairs]
        results = self._reduce_values(reduce_op, per_value, options)
        mirror = utils.mirror
        return [mirror(r, d) for r, (_, d) in zip(results, value_destination_pairs, strict=True)]

    def _gather_implementation(
        self, per_replica_value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        values = utils.local_values(per_replica_value)
        utils.check_gather_axis([as_array(v) for v in values], axis)  # TF: before the dtype
        utils.check_collective_gather_dtype(as_array(values[0]).dtype)
        local = utils.concat_for_gather(values, axis)
        comm = self._communicator
        result = local.copy() if comm is None else comm.all_gather(local, axis, options)
        return utils.mirror(result, destinations)

    def _reduce_values(
        self,
        reduce_op: ReduceOp,
        per_value: Sequence[Sequence[Any]],
        options: CommunicationOptions | None,
    ) -> list[Any]:
        """Each entry's local values reduced over the whole group, in order."""
        comm = self._communicator
        sparse = []
        dtypes = set()
        entries: list[Sequence[Any]] = []  # a lone dense value converted once (a variable read)
        for i, values in enumerate(per_value):
            first = values[0]
            if type(first) is IndexedSlices:
                sparse.append(i)
                utils.check_collective_gather_dtype(first.values.dtype)
            else:
                first = as_array(first)
                dtypes.add(first.dtype)
                if len(values) == 1 and first is not values[0]:
                    values = (first,)
            entries.append(values)
        per_value = entries
        for dtype in dtypes:
            utils.check_collective_reduce_dtype(dtype)
        if comm is None:
            return [utils.simple_reduce(values, reduce_op) for values in per_value]
        n = self._group_size
        if not sparse:
            return _across_workers(comm, per_value, [], options, reduce_op, n)
        # Which collectives follow depends on each value's kind: a batch that mixes dense and
        # sparse values names its kinds, or ranks whose kinds differ only in order would make
        # the same calls with each other's values.
        kinds = "".join("S" if type(v[0]) is IndexedSlices else "D" for v in per_value)
        with api_call(None, "", kind=kinds):
            return _across_workers(comm, per_value, sparse, options, reduce_op, n)


def _across_workers(
    comm: Communicator,
    per_value: Sequence[Sequence[Any]],
    sparse: list[int],
    options: CommunicationOptions | None,
    reduce_op: ReduceOp,
    n: int,
) -> list[Any]:
    """Each entry reduced over the ``n`` replicas of every worker (``utils.mean_divisors``).

    Sparse entries are concatenated (a MEAN divides their values). Dense ones go through
    :func:`_dense_entries`; an empty batch is agreed too (a peer may have values).
    """
    out: list[Any] = [None] * len(per_value)
    dense = (
        [i for i in range(len(per_value)) if i not in sparse]
        if sparse
        else list(range(len(per_value)))
    )
    if dense or not sparse:
        entries = [per_value[i] for i in dense]
        reduced = _dense_entries(comm, entries, options, reduce_op, n)
        for i, r in zip(dense, reduced, strict=True):
            out[i] = r
    for i in sparse:
        s = utils.local_concat(per_value[i])
        values, indices = comm.all_gather_sparse(s.values, s.indices, options)
        after = n if reduce_op is ReduceOp.MEAN else None  # concatenated: divided after
        out[i] = utils.divide(IndexedSlices(values, indices, s.dense_shape), after, True)
    return out


def _dense_entries(
    comm: Communicator,
    entries: Sequence[Sequence[Any]],
    options: CommunicationOptions | None,
    reduce_op: ReduceOp,
    n: int,
) -> list[Any]:
    """Dense entries reduced over the group: a lone one as addends, the others in one batch.

    With op determinism on and k > 1 local replicas, each entry's replicas are addends of one
    exact sum (one call per entry): summing them locally first would round twice. A batch's
    MEAN divides inside its exact sums only when every entry's does (``utils.mean_divisors``).
    """
    if len(entries) == 1 or (switches.op_determinism and any(len(e) > 1 for e in entries)):
        return [_dense_across_workers(comm, e, options, reduce_op, n) for e in entries]
    local_sum = utils.local_sum
    arrays = [e[0] if len(e) == 1 else local_sum(e, None) for e in entries]  # converted above
    dtypes = {a.dtype for a in arrays}  # the MEAN rule once per dtype, not per array
    inside = min((utils.mean_divisors(reduce_op, d, n)[0] for d in dtypes), default=1)
    sums = comm.batch_all_reduce(arrays, Op.SUM, options, inside)  # n: every entry inside
    if inside != 1 or reduce_op is not ReduceOp.MEAN:
        return sums
    return [utils.divide(s, n, True) for s in sums]


def _dense_across_workers(
    comm: Communicator,
    values: Sequence[Any],
    options: CommunicationOptions | None,
    reduce_op: ReduceOp,
    n: int,
) -> Any:
    """One dense value reduced over the ``n`` replicas of the group: ONE collective call.

    The local replicas' values are handed to the collective as addends, which sums them into
    the buffer it reduces in place: one full-size buffer whatever the number of replicas. A
    MEAN divides where ``utils.mean_divisors`` says (inside an exact sum, or after).

    Raises:
      InvalidArgumentError: for a dtype TF's collective kernel does not take.
    """
    first = as_array(values[0])
    utils.check_collective_reduce_dtype(first.dtype)
    inside, after = utils.mean_divisors(reduce_op, first.dtype, n)
    if len(values) == 1 and inside == 1:
        result = comm.all_reduce(first, Op.SUM, options)
    else:
        result = comm.all_reduce_addends([as_array(v) for v in values], Op.SUM, options, inside)
    return result if after is None else utils.divide(result, after, True)
