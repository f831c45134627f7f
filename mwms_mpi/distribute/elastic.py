"""``ElasticHandler``: training steps that survive a lost rank, without a restart.

An mwms_mpi extension (TF has no elastic MultiWorkerMirroredStrategy), in the spirit of TF's
``PreemptionCheckpointHandler``: ``handler.run(train_step, iterator)`` runs one step as a
transaction. Where MPI's fault tolerance is on (Open MPI launched with ``mpiexec --with-ft
ulfm``, docs/elastic.md), a peer's failure during the step raises ``UnavailableError`` on every
survivor (the call template revokes the strategy's communicator); the handler then

1. shrinks the strategy to the survivors (``CollectiveAllReduceExtended._shrink``: worker ids,
   the chief, ``num_replicas_in_sync``), again if another rank fails meanwhile;
2. agrees the last step completed on every survivor (a MIN over the survivors: a rank killed
   inside the step's last collective can leave some survivors with its result, one step
   ahead);
3. puts the state back as it was after that step, from an in-memory copy (two are kept: the
   state before this step and before the one before, for the survivor one step ahead);
4. remakes the input for the new world at that step (the global batch stays; the per-replica
   batches grow), in place, in the iterator the caller holds;
5. runs the step again.

Every step afterwards equals a fresh run on the survivors restored at that step: the input is
a function of (step, surviving ranks in order) and the state is the step's. Collective work
between steps (a checkpoint's save, an epoch's metrics) survives a lost rank the same way
through ``handler.call(fn)`` and ``handler.save()``: after the recovery it runs again on the
new world. Below
``min_workers`` the survivors save a checkpoint and exit with TF's restart code (42).
Elsewhere (MPICH, Intel MPI, or no ``--with-ft ulfm``) it says so once and runs each step as
it is: a lost rank ends the job, naming it, as without the handler.

SIGTERM (Slurm's time limit or ``--signal``, ``scancel``, a node reclaimed) is a termination
notice, agreed at the start of each step with one small collective (the ranks' minimum and
maximum of "noticed"), as ``PreemptionCheckpointHandler`` agrees it: on every worker (or
wherever a lost rank cannot be survived) the workers save and exit with 42 together; on some
workers only, those leave as lost machines (``_lifecycle.Terminated``) and the others go on.
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from mwms_mpi import _failure_report, _lifecycle, errors
from mwms_mpi._logging import get_logger
from mwms_mpi._mpi import mpi
from mwms_mpi.collective import ulfm
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.distribute import _state_copy
from mwms_mpi.distribute.input_lib import DistributedIterator
from mwms_mpi.train.checkpoint_management import CheckpointManager

_log = get_logger(__name__)

_FAILED_AGAIN = 2  # _agree_failed: a lost rank raised at a step where one had raised before
_STOP = object()  # a step not run: every worker stops for a termination notice


class ElasticHandler:
    """Runs training steps so that the job survives a lost rank (Open MPI with ULFM).

    Args:
      strategy: a ``MultiWorkerMirroredStrategy``.
      checkpoint: the trainable state: a ``Checkpoint``, a ``CheckpointManager`` (then it
        also saves below ``min_workers``), or the objects a ``Checkpoint`` would be given.
        Every variable must exist before the first step (``optimizer.build(...)``).
      min_workers: below this many workers the survivors save (with a ``CheckpointManager``)
        and exit with TF's restart code, 42.

    Raises:
      ValueError: for a strategy that is not multi-worker capable or ``min_workers < 1``.
    """

    def __init__(self, strategy: Any, checkpoint: Any, min_workers: int = 1) -> None:
        if int(min_workers) < 1:
            raise ValueError(f"min_workers must be at least 1, got {min_workers}.")
        if not callable(getattr(strategy.extended, "_shrink", None)):
            raise ValueError(
                "ElasticHandler needs a MultiWorkerMirroredStrategy, got "
                f"{type(strategy).__name__}."
            )
        self._strategy = strategy
        self._manager = checkpoint if isinstance(checkpoint, CheckpointManager) else None
        self._state = checkpoint.checkpoint if self._manager is not None else checkpoint
        self._min_workers = int(min_workers)
        self._copies: collections.deque[_state_copy.StateCopy] = collections.deque(maxlen=2)
        self._iterator: DistributedIterator | None = None  # the last one run() was given
        self._steps = 0
        self._failed_at: float | None = None  # when the failure being recovered was seen
        self._failed_steps: set[int] = set()  # steps at which a lost rank had raised
        self._noticed = False  # SIGTERM reached this rank (set by the signal's handler)
        self.recoveries: list[Recovery] = []
        if threading.current_thread() is threading.main_thread():  # where Python allows it
            signal.signal(signal.SIGTERM, self._notice)
            signal.siginterrupt(signal.SIGTERM, False)  # restart interrupted system calls
        workers = strategy.extended._num_workers
        self._elastic = workers > 1 and ulfm.enabled(mpi())
        if workers > 1 and not self._elastic and strategy.extended.should_checkpoint:
            _log.warning(
                "ElasticHandler: a lost rank cannot be survived here (%s); it ends the job, "
                "naming the rank, and a restart resumes from the last checkpoint.",
                ulfm.describe(mpi()),
            )

    @property
    def steps(self) -> int:
        """The steps this handler has completed (after a recovery, on every survivor alike)."""
        return self._steps

    def run(self, train_step: Callable[..., Any], iterator: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs ``train_step(next(iterator), *args, **kwargs)`` once, surviving a lost rank.

        ``iterator`` must come from ``iter()`` of a dataset this strategy distributed; after a
        recovery it is the new world's, at the agreed step (the same object).

        A termination notice (SIGTERM) agreed at its start ends the job with a save and exit
        code 42 instead, or this rank alone (module docstring).

        Returns:
          What ``train_step`` returned.

        Raises:
          StopIteration: at the end of the input.
          Terminated: (``_lifecycle``) on a rank that got SIGTERM when others did not, where
            they can go on without it: the runner (``--elastic``) ends it as a lost machine.
        """
        if self._elastic:
            _check_iterator(iterator)
            self._iterator = iterator  # remade in place by a recovery

        def step() -> Any:  # the notice is agreed inside the step's transaction
            if self._stop_for_notice():
                return _STOP
            return train_step(next(iterator), *args, **kwargs)

        result = self.call(step)
        if result is _STOP:
            self._save_and_restart("a termination notice (SIGTERM)")
        self._steps += 1
        if self._failed_at is not None:  # the first step completed after a recovery
            seconds = time.perf_counter() - self._failed_at
            self._failed_at = None
            for recovery in self.recoveries:
                if recovery.seconds is None:  # a failure during a recovery's step: both
                    recovery.seconds = seconds
                    self._report(recovery)
        return result

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn(*args, **kwargs)`` between steps, surviving a lost rank: collective work
        such as a checkpoint's save or an epoch's metrics. After a recovery (to the last step
        completed everywhere, the input remade for the new world) the survivors run ``fn``
        again, on the new world; so ``fn`` must do the same when run again after its state
        was put back as it was before the call (changes to variables of the trainable state
        made by ``fn`` are undone first).

        Returns:
          What ``fn`` returned.
        """
        if not self._elastic:
            return fn(*args, **kwargs)
        while True:
            try:  # copying a SyncOnReadVariable is a collective: it can meet the failure too
                self._keep_copy()
                return fn(*args, **kwargs)
            except errors.UnavailableError:
                if not _lifecycle.peer_failure_seen():
                    raise
                self._recover()

    def save(self, *args: Any, **kwargs: Any) -> str | None:
        """The ``CheckpointManager``'s ``save(*args, **kwargs)``, surviving a lost rank (as
        :meth:`call`): a save cut by a lost rank is made again by the survivors under the
        same number, the new chief writing it (over what was written before).

        Raises:
          ValueError: if the handler was given no ``CheckpointManager``.
        """
        manager = self._manager
        if manager is None:
            raise ValueError("ElasticHandler.save needs the handler made with a CheckpointManager.")
        counter = manager.checkpoint.save_counter
        before = counter.read_value()

        def save_once() -> str | None:
            counter.assign(before)  # a save cut short had counted itself already
            return manager.save(*args, **kwargs)

        return self.call(save_once)

    def _notice(self, signum: int, frame: Any) -> None:
        self._noticed = True

    def _stop_for_notice(self) -> bool:
        """Agrees whether a termination notice reached any worker: ``True`` where every worker
        stops (all of them noticed, or a lost rank cannot be survived here); a noticed rank
        that the others can go on without raises ``Terminated``.

        Raises:
          Terminated: on a rank that noticed while another did not (elastic mode).
        """
        mine = int(self._noticed)
        communicator = self._strategy.extended._communicator
        if communicator is None:  # one worker
            return bool(mine)
        with api_call(communicator, "ElasticHandler.run"):
            least, most = communicator.min_max(mine, "a termination notice (SIGTERM)")
        if not most:
            return False
        if least or not self._elastic:
            return True
        if mine:
            raise _lifecycle.Terminated
        return False  # the noticed ranks leave: this step's first collective meets it

    def _keep_copy(self) -> None:
        """Copies the state now; a copy of the same step (taken before, or before a recovery)
        is replaced, so that the copy of the step before stays (module docstring, 3)."""
        position = 0 if self._iterator is None else self._iterator._position
        copy = _state_copy.take(self._state, self._steps, position)
        if self._copies and self._copies[-1].step == self._steps:
            self._copies.pop()
        self._copies.append(copy)

    def _recover(self) -> None:
        """Steps 1 to 4 of the module's docstring."""
        if self._failed_at is None:
            self._failed_at = time.perf_counter()
        extended = self._strategy.extended
        world = set(extended._communicator.world_ranks)
        while True:
            try:
                survivors = extended._shrink()
                lost = sorted(world - set(survivors))
                reports = [r for r in map(_failure_report.report_of, lost) if r is not None]
                least, most = self._agree_steps()
                failed = self._agree_failed(bool(reports), least)
                break
            except errors.UnavailableError:  # another rank failed meanwhile
                if not _lifecycle.peer_failure_seen():
                    raise
        _failure_report.renew_receives(survivors)  # for the report of a rank lost later
        if failed and not reports:  # it reached another survivor: this one ends alike
            reports = ["(a lost rank's report of an uncaught exception reached another rank)"]
        for report in reports:
            _lifecycle.note_lost_rank_failure(report)
        if failed == _FAILED_AGAIN:
            self._stop_failing_again(reports, least)
        copy = self._copy_at(least, most)
        _state_copy.restore(self._state, copy)
        self._steps = least
        self._copies.clear()
        if self._iterator is not None:
            remake_iterator(self._iterator, copy.position)
        self.recoveries.append(Recovery(tuple(lost), survivors, least, tuple(reports)))
        if len(survivors) < self._min_workers:
            self._stop_below_minimum(len(survivors))

    def _agree_steps(self) -> tuple[int, int]:
        communicator = self._strategy.extended._communicator
        if communicator is None:  # one survivor: nothing to agree
            return self._steps, self._steps
        with api_call(communicator, "ElasticHandler.run"):
            return communicator.min_max(self._steps, "steps completed before the failure")

    def _agree_failed(self, reported: bool, step: int) -> int:
        """Whether a lost rank failed with an exception (a report reached any survivor), and
        whether one did at this step before: the survivors decide alike."""
        again = reported and step in self._failed_steps
        mine = _FAILED_AGAIN if again else int(reported)
        communicator = self._strategy.extended._communicator
        if communicator is not None:
            with api_call(communicator, "ElasticHandler.run"):
                mine = communicator.min_max(mine, "a lost rank failed with an exception")[1]
        if mine:
            self._failed_steps.add(step)
        return mine

    def _stop_failing_again(self, reports: list[str], step: int) -> NoReturn:
        """A step that raised again after a shrink is a bug, not a lost machine: going on
        would shrink to ``min_workers`` and be restarted for ever. Every survivor ends,
        non-zero and without TF's restart code."""
        if self._strategy.extended.should_checkpoint:
            text = "\n".join(reports) or "(the report reached another survivor)"
            _log.error(
                "ElasticHandler: step %d failed with an uncaught exception again after a lost "
                "rank was left behind; a bug, not a lost machine: ending the job.\n%s",
                step,
                text,
            )
        _lifecycle.exit_without_finalize(_lifecycle.EXCEPTION_STATUS)

    def _copy_at(self, least: int, most: int) -> _state_copy.StateCopy:
        for copy in self._copies:
            if copy.step == least:
                return copy
        raise errors.InternalError(
            None,
            None,
            f"ElasticHandler on rank {mpi().COMM_WORLD.Get_rank()}: the survivors completed "
            f"between {least} and {most} steps, and this rank holds the state at steps "
            f"{[c.step for c in self._copies]} only: a rank was lost while the state was "
            "being copied (its share of a SyncOnReadVariable went with it), or a step made "
            "no collective call (workers ran more than one step apart). Restart from the "
            "last checkpoint.",
        )

    def _stop_below_minimum(self, workers: int) -> None:
        """Saves (with a ``CheckpointManager``) and exits with TF's restart code, together."""
        self._save_and_restart(
            f"{workers} worker(s) left, fewer than min_workers={self._min_workers}",
            after_recovery=True,
        )

    def _save_and_restart(self, why: str, after_recovery: bool = False) -> NoReturn:
        """Every worker saves (with a ``CheckpointManager``) and exits with TF's restart code.

        Between steps the save is a transaction (:meth:`save`); right after a recovery it is
        made as it is (a rank lost in it ends the job: its state is the step agreed).
        """
        if self._strategy.extended.should_checkpoint:
            _log.warning(
                "ElasticHandler: %s: saving and exiting with %d to be restarted.",
                why,
                _lifecycle.RESTART_CODE,
            )
        if self._manager is not None:
            if after_recovery:
                self._manager.save()
            else:
                self.save()
        _lifecycle.agreed_exit(_lifecycle.RESTART_CODE)

    def _report(self, recovery: Recovery) -> None:
        if not self._strategy.extended.should_checkpoint:
            return
        for report in recovery.reports:
            _log.error("ElasticHandler: a lost rank had failed with an exception:\n%s", report)
        _log.warning(
            "ElasticHandler: lost rank(s) %s; %d worker(s) (ranks %s) went on from step %d "
            "in %.3f s (failure seen to the first step completed).",
            list(recovery.lost),
            len(recovery.survivors),
            list(recovery.survivors),
            recovery.step,
            recovery.seconds,
        )


class Recovery:
    """One recovery: the ``COMM_WORLD`` ranks lost, the survivors, the step the survivors went
    back to, the reports of lost ranks that failed with an exception, and the seconds from
    the failure to the first step completed."""

    def __init__(
        self,
        lost: tuple[int, ...],
        survivors: tuple[int, ...],
        step: int,
        reports: tuple[str, ...] = (),
    ) -> None:
        self.lost = lost
        self.survivors = survivors
        self.step = step
        self.reports = reports  # what lost ranks that failed with an exception sent (--elastic)
        self.seconds: float | None = None

    def __repr__(self) -> str:
        return (
            f"Recovery(lost={list(self.lost)}, survivors={list(self.survivors)}, "
            f"step={self.step}, seconds={self.seconds})"
        )


def _check_iterator(iterator: Any) -> None:
    if not isinstance(iterator, DistributedIterator) or iterator._source is None:
        raise ValueError(
            "ElasticHandler.run needs an iterator of a distributed dataset, "
            "iter(strategy.experimental_distribute_dataset(dataset)) or "
            f"iter(strategy.distribute_datasets_from_function(fn)), got {type(iterator).__name__}."
        )


def remake_iterator(iterator: DistributedIterator, position: int) -> None:
    """Makes ``iterator`` (in place) the strategy's current world's, ``position`` steps on."""
    source = iterator._source
    remake = None if source is None else source._remake
    if remake is None:
        raise ValueError("This iterator's dataset cannot be distributed again.")
    dataset = remake(position)
    dataset._remake = remake  # positions stay counted from the original dataset's start
    fresh = iter(dataset)
    fresh._position = position
    iterator.__dict__.update(fresh.__dict__)
