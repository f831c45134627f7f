"""``tf.distribute.experimental.PreemptionCheckpointHandler``: on a termination notice, every
worker saves the same step, then exits to be restarted.

TF 2.21 (``failure_handling.py``) runs this through its coordination service: the worker that gets
SIGTERM publishes "save after run N+1" (N: its ``run`` calls so far), every worker's watcher
thread picks the key up, and at the start of that call every worker saves and calls ``exit_fn``
(default ``sys.exit(42)``). Here the same decision is agreed synchronously: at the start of every
``run`` (and ``save_checkpoint_if_preempted``) the workers take, with one small collective on the
strategy's communicator, the minimum and maximum of ``4 * runs + notice`` (notice 0: none,
1: a termination notice, 2: the end of a grace period). The maximum says whether any worker got a
notice, the minimum that all of them are at the same call. As in TF, the checkpoint is saved at
the start of the next call, so one more step runs after the notice, and every rank exits through
:func:`mwms_mpi._lifecycle.agreed_exit`, so ``python -m mwms_mpi.run`` ends the job with that code
and no ``MPI_Abort``. On restart, the handler restores the latest checkpoint when it is made.

Signals reach Python only between bytecodes: a rank blocked in a long MPI call records the notice
when the call returns, which is early enough, since the agreement is at the next call.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors
from mwms_mpi._context import CommunicatorLike, StrategyLike
from mwms_mpi._lifecycle import RESTART_CODE, agreed_exit
from mwms_mpi.cluster import multi_worker_util
from mwms_mpi.train.checkpoint import Checkpoint, strategy_for
from mwms_mpi.train.checkpoint_management import CheckpointManager
from mwms_mpi.values.variables import Variable

_LOG = logging.getLogger(__name__)
_ITERATION_VARIABLE = "checkpointed_runs"
_POLL_INTERVAL_S = 1.0  # how often TF calls `termination_watcher_fn`
_NONE, _NOTICE, _FINAL = 0, 1, 2


class TerminationConfig:
    """Customization of ``PreemptionCheckpointHandler`` for various platforms.

    Args:
      termination_watcher_fn: a function to execute repeatedly (every second, on a thread)
        that returns ``True`` if a preemption signal is available and ``False`` otherwise.
        By default, ``signal.SIGTERM`` is the termination notice (Slurm sends it at the time
        limit, at ``scancel`` and, with ``sbatch --signal=TERM@<seconds>``, before the limit).
      exit_fn: a function to execute after a checkpoint is saved and before the preemption
        happens, usually ``lambda: sys.exit(RESTART_CODE)``; by default every rank exits with
        code 42, as TF does. A ``SystemExit`` it raises is marked as agreed by every rank.
      grace_period: the length of time, in seconds, between receiving a preemption signal and
        the actual preemption. If positive, a checkpoint is saved at once, training goes on,
        and a final checkpoint is saved (then the program exits) shortly before it ends.
      save_fn: an optional function letting you configure how to save a checkpoint, called
        with the arguments of ``save_checkpoint_if_preempted``; by default
        ``CheckpointManager.save``.
    """

    def __init__(
        self,
        termination_watcher_fn: Callable[[], bool] | None = None,
        exit_fn: Callable[[], Any] | None = None,
        grace_period: float | None = None,
        save_fn: Callable[..., Any] | None = None,
    ) -> None:
        self.termination_watcher_fn = termination_watcher_fn
        self.exit_fn = exit_fn
        self.grace_period = grace_period
        self.save_fn = save_fn


def _min_max_over_workers(communicator: CommunicatorLike | None, value: int) -> tuple[int, int]:
    """``(min, max)`` of ``value`` over every worker: the one agreement this module makes.

    Without a communicator (one worker) there is nothing to agree with.
    """
    if communicator is None:
        return value, value
    return communicator.min_max(value, "preemption: run() calls and termination notice")


class PreemptionCheckpointHandler:
    """Preemption and error handler for synchronous training.

    Saves a checkpoint on every worker at the same step when any worker receives a termination
    notice, then exits; when created, restores the latest checkpoint, if there is one.
    Training code calls ``run`` once per step (a single-step ``distributed_train_function``)::

        strategy = mwms_mpi.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model, optimizer = ...
            step_in_epoch = mwms_mpi.Variable(np.int64(0), name="step_in_epoch")
            checkpoint = mwms_mpi.train.Checkpoint(model=model, optimizer=optimizer,
                                                   step_in_epoch=step_in_epoch)
            handler = PreemptionCheckpointHandler(strategy.cluster_resolver, checkpoint, dir)
        while step_in_epoch.numpy() < STEPS:
            loss = handler.run(distributed_train_step, next(iterator))
            step_in_epoch.assign_add(1)

    Args:
      cluster_resolver: a ``ClusterResolver`` (``strategy.cluster_resolver``).
      checkpoint_or_checkpoint_manager: a ``mwms_mpi.train.CheckpointManager`` or a
        ``mwms_mpi.train.Checkpoint``; for a ``Checkpoint``, the handler makes a
        ``CheckpointManager(max_to_keep=1)`` in ``checkpoint_dir``. The handler adds a
        ``checkpointed_runs`` variable to the checkpoint (the ``run`` calls at its last save).
      checkpoint_dir: where the handler saves and restores checkpoints (needed with a
        ``Checkpoint``).
      termination_config: a ``TerminationConfig``.

    Raises:
      InvalidArgumentError: a ``Checkpoint`` without a ``checkpoint_dir``.
      NotImplementedError: the cluster has a ``ps`` job.
      ValueError: the cluster has several workers but the checkpoint's strategy (the current
        one, or its variables') has no communicator to agree over.
    """

    def __init__(
        self,
        cluster_resolver: Any,
        checkpoint_or_checkpoint_manager: Any,
        checkpoint_dir: str | None = None,
        termination_config: TerminationConfig | None = None,
    ) -> None:
        if isinstance(checkpoint_or_checkpoint_manager, Checkpoint) and not checkpoint_dir:
            raise errors.InvalidArgumentError(
                None, None, "When a checkpoint is passed, a checkpoint_dir must be passed as well."
            )
        self._cluster_resolver = cluster_resolver
        self._termination_config = termination_config
        self._checkpoint_or_checkpoint_manager = checkpoint_or_checkpoint_manager
        self._checkpoint_dir = checkpoint_dir
        config = termination_config or TerminationConfig()
        self._termination_watcher_fn = config.termination_watcher_fn
        self._exit_fn = config.exit_fn
        self._grace_period = float(config.grace_period or 0)
        self._save_fn = config.save_fn
        spec = cluster_resolver.cluster_spec() if cluster_resolver is not None else None
        if spec is not None and "ps" in spec.as_dict():
            raise NotImplementedError(
                "PreemptionCheckpointHandler does not support usage with "
                "tf.distribute.experimental.ParameterServerStrategy."
            )
        self._local_mode = spec is None or not spec.jobs
        self._id_in_cluster = "single_worker"
        self._is_chief = True
        if not self._local_mode:
            task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id
            self._id_in_cluster = str(multi_worker_util.id_in_cluster(spec, task_type, task_id))
            self._is_chief = multi_worker_util.is_chief(spec, task_type, task_id)
        self._checkpointed_runs = Variable(
            np.int64(0), trainable=False, name=_ITERATION_VARIABLE, dtype=np.int64
        )
        self._manager = self._checkpoint_manager()
        checkpoint = self._manager.checkpoint
        if not hasattr(checkpoint, _ITERATION_VARIABLE):
            setattr(checkpoint, _ITERATION_VARIABLE, self._checkpointed_runs)
        self._communicator = self._agreement_communicator(checkpoint, spec)
        self._manager.restore_or_initialize()
        self._run_counter = int(np.asarray(self._checkpointed_runs.numpy()))
        self._runs_timed = 0
        self._estimated_run_time = 0.0
        self._step_to_checkpoint: int | None = None
        self._final_checkpoint_countdown = False
        self._exited = False
        self._received_own_sigterm = threading.Event()
        self._received_own_sigterm_time = 0.0
        self._stop_polling = threading.Event()
        self._poll_thread: threading.Thread | None = None
        if self._termination_watcher_fn is not None:
            self._poll_thread = threading.Thread(
                target=self._poll_termination_signal,
                name=f"WorkerTerminationSignalWatcher-{self._id_in_cluster}",
                daemon=True,
            )
            self._poll_thread.start()
        else:
            signal.signal(signal.SIGTERM, self._sigterm_handler_fn)
            signal.siginterrupt(signal.SIGTERM, False)  # restart interrupted system calls

    def _checkpoint_manager(self) -> CheckpointManager:
        """The given manager, or one for the given checkpoint in ``checkpoint_dir`` (as TF).

        One manager serves every worker: ``Checkpoint`` itself sends non-chief workers' writes
        to ``workertemp_<task_id>`` and removes them (TF makes a second manager for that).
        """
        given = self._checkpoint_or_checkpoint_manager
        if isinstance(given, CheckpointManager):
            return given
        return CheckpointManager(given, directory=str(self._checkpoint_dir), max_to_keep=1)

    def _agreement_communicator(self, checkpoint: Checkpoint, spec: Any) -> CommunicatorLike | None:
        """The communicator of the checkpoint's strategy: the one the workers agree over."""
        strategy: StrategyLike = strategy_for(checkpoint)
        communicator = strategy.extended.communicator
        workers = 1
        if not self._local_mode:
            workers = multi_worker_util.worker_count(spec, self._cluster_resolver.task_type)
        if communicator is None and workers > 1:
            raise ValueError(
                f"PreemptionCheckpointHandler: the cluster has {workers} workers, but "
                f"{type(strategy).__name__} has no communicator for them to agree over when to "
                "save. Create the handler inside the MultiWorkerMirroredStrategy's scope, or "
                "checkpoint variables created in it."
            )
        return communicator

    # -- termination notices ------------------------------------------------------------------

    def _sigterm_handler_fn(self, signum: int, frame: Any) -> None:
        del signum, frame
        self._maybe_set_received_own_sigterm()

    def _maybe_set_received_own_sigterm(self) -> None:
        if not self._received_own_sigterm.is_set():
            self._received_own_sigterm_time = time.monotonic()
            self._received_own_sigterm.set()

    def _poll_termination_signal(self) -> None:
        """Calls ``termination_watcher_fn`` every second until it returns True, or stopped."""
        watcher = self._termination_watcher_fn
        assert watcher is not None
        while not self._stop_polling.is_set() and not self._final_checkpoint_countdown:
            if watcher():
                self._maybe_set_received_own_sigterm()
                return
            self._stop_polling.wait(_POLL_INTERVAL_S)

    def _stop_poll_termination_signal_thread(self) -> None:
        self._stop_polling.set()
        thread, self._poll_thread = self._poll_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __del__(self) -> None:
        stop = getattr(self, "_stop_polling", None)
        if stop is not None:
            stop.set()

    def _own_notice(self) -> int:
        """What this worker contributes: a notice, or (counting down) the end of its grace."""
        if not self._received_own_sigterm.is_set():
            return _NONE
        if not self._final_checkpoint_countdown:
            return _NOTICE
        # TF's margin: three times two estimated steps before the grace period ends.
        margin = 3 * 2 * self._estimated_run_time
        deadline = self._received_own_sigterm_time + self._grace_period - margin
        return _FINAL if time.monotonic() >= deadline else _NONE

    # -- the public API -----------------------------------------------------------------------

    @property
    def total_run_calls(self) -> int:
        """The number of times ``run`` (or ``save_checkpoint_if_preempted``) was called.

        Restored from the checkpoint, so it counts the calls before a restart too.
        DEPRECATED in TF: track steps with a variable saved in the checkpoint instead.
        """
        warnings.warn(
            "PreemptionCheckpointHandler.total_run_calls is deprecated: track steps using a "
            "Variable saved in the checkpoint instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._run_counter

    def run(self, distributed_train_function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs a training function with error and preemption handling.

        First agrees with every worker whether a termination notice arrived anywhere; if it did
        (one call earlier), saves a checkpoint and exits. Otherwise returns
        ``distributed_train_function(*args, **kwargs)``. Every worker must call it once per
        step, with a single-step function.

        Raises:
          RuntimeError: the workers have called ``run`` different numbers of times.
        """
        self._check_preemption_and_maybe_checkpoint()
        start = time.monotonic()
        result = distributed_train_function(*args, **kwargs)
        self._run_counter += 1
        self._runs_timed += 1
        self._estimated_run_time += (
            time.monotonic() - start - self._estimated_run_time
        ) / self._runs_timed
        return result

    def save_checkpoint_if_preempted(self, *args: Any, **kwargs: Any) -> None:
        """Saves a checkpoint (and exits) if a termination notice has been made available.

        An alternative to ``run``: call it once per step, after the step. Arguments go to
        ``CheckpointManager.save`` (or ``TerminationConfig.save_fn``).
        """
        self._check_preemption_and_maybe_checkpoint(*args, **kwargs)
        self._run_counter += 1
        self._estimated_run_time = 0.0

    @contextlib.contextmanager
    def watch_preemption_scope(self) -> Iterator[None]:
        """For ``TPUStrategy`` in TF; with ``MultiWorkerMirroredStrategy`` it does nothing.

        Errors raised inside propagate; a multi-worker job launched with
        ``python -m mwms_mpi.run`` then ends on every worker.
        """
        yield

    # -- the protocol -------------------------------------------------------------------------

    def _check_preemption_and_maybe_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        """Saves (and exits) at the call agreed one call earlier; otherwise agrees anew."""
        if self._exited:
            return
        if self._step_to_checkpoint is not None:
            if self._step_to_checkpoint == self._run_counter:
                # As TF: a save that raised, or an exit that did not end the program (exit_fn
                # raised, or its SystemExit was caught), is made again by the next call.
                self._save_checkpoint(*args, **kwargs)
                if self._grace_period <= 0 or self._final_checkpoint_countdown:
                    self._exit()
                else:
                    _LOG.info("Continue training for the grace period.")
                    self._final_checkpoint_countdown = True
                self._step_to_checkpoint = None
            return
        low, high = _min_max_over_workers(
            self._communicator, 4 * self._run_counter + self._own_notice()
        )
        if low // 4 != high // 4:
            raise RuntimeError(
                "PreemptionCheckpointHandler: the workers are at different steps: "
                f"{low // 4} run() calls on some, {high // 4} on others (this worker: "
                f"{self._run_counter}). Every worker must call run() (or "
                "save_checkpoint_if_preempted()) once per step, and restore the same checkpoint: "
                "give every worker the chief's checkpoint directory (TF's tutorial gives the "
                "others a manager in workertemp_<task_id>, where mwms_mpi keeps no copy: its "
                "Checkpoint writes and removes the non-chief copies itself)."
            )
        agreed = high % 4
        if agreed == _FINAL or (agreed == _NOTICE and not self._final_checkpoint_countdown):
            self._step_to_checkpoint = self._run_counter + 1
            _LOG.info(
                "PreemptionCheckpointHandler: a termination notice reached the cluster; "
                "saving a checkpoint after run %d",
                self._step_to_checkpoint,
            )

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._checkpointed_runs.assign(np.int64(self._run_counter))
        if self._save_fn is not None:
            self._save_fn(*args, **kwargs)
        else:
            self._manager.save(*args, **kwargs)
        if self._is_chief:
            _LOG.warning(
                "PreemptionCheckpointHandler: saved a checkpoint in %s after %d run() calls",
                self._manager.directory,
                self._run_counter,
            )

    def _exit(self) -> None:
        """Runs ``exit_fn`` (default: exit code 42) as an exit every worker agreed on."""
        self._stop_poll_termination_signal_thread()
        if self._exit_fn is None:
            agreed_exit(RESTART_CODE)  # TF: `sys.exit(42)` off GCP
        try:
            self._exit_fn()
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                agreed_exit(exc.code or 0)
            raise
        self._exited = True  # exit_fn returned: training goes on, with no more saves (TF)
