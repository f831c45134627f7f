"""Every collective call is agreed by every rank before its data moves (docs/architecture.md).

Each call contributes a fingerprint: the digest of its layout (cached per layout by the
caller), the digest of what the user called (``call_context``) and the call's number on the
communicator, mixed. One small collective decides: every rank sends ``[f, -f, v, -v]`` to a
MAX all-reduce, so ``max f == min f`` says whether all fingerprints are equal, and ``v`` (a
gather's row count, a value to agree on) comes back as its minimum and maximum in the same call.
Only when fingerprints differ do the ranks exchange full :class:`Signature` objects, so that
every rank raises one ``InvalidArgumentError`` that names each rank's call.

Rules that keep the agreement itself from hanging:

* every agreement, of every collective kind, and a rank's "my arguments are invalid", is the
  same MPI call (4 int64, MAX) on a communicator that carries nothing else but what follows an
  agreement every rank has passed (a gather's row counts, the signatures of a mismatch);
* the call number advances only when an agreement completes, and then on every rank;
* the call is an MPI-4 persistent request, made once at construction (``Allreduce_init`` where
  the library has it), which saves most of its cost: measured below a plain 16-byte
  ``Allreduce`` with the mpich wheel. Before MPI 4.0 it is ``Iallreduce`` on every path, with
  or without a deadline: MPI matches no blocking collective with a nonblocking one.

``MWMS_MPI_CHECK=first`` agrees a layout only on its first use on this rank and trusts it after:
faster for small messages, and unsafe (a divergence after warm-up hangs or returns wrong
numbers). ``MWMS_MPI_CHECK=callsite`` is a debug mode: every call is agreed, and its fingerprint
also holds the user's source line (``call_context.user_site``), so the same API called from
different lines on different ranks raises, naming both lines; it costs a walk up the stack per
call (docs/agreement.md has the numbers). The mode is itself agreed when a communicator is built.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from mwms_mpi import _config, _env, errors
from mwms_mpi.collective import call_context
from mwms_mpi.collective.call_context import CallContext
from mwms_mpi.collective.signature import Layout, Signature, digest, mismatch_message

CHECK_ENV = "MWMS_MPI_CHECK"
# "always" (default): agree every call; "first": a layout's first use only (unsafe);
# "callsite": every call, with the user's source line in its fingerprint (debugging).
CHECK_MODES = ("always", "first", "callsite")
_MASK = (1 << 62) - 1  # fingerprints and values stay in [0, 2**62): negation cannot overflow
_MIX_CONTEXT = 0x9E3779B97F4A7C15
_MAX_CONTEXTS = 4096
_MAX_TRUSTED = 4096  # layouts MWMS_MPI_CHECK=first remembers as agreed
VALUE_LIMIT = 1 << 62  # |value| a rank may contribute to an agreement


def check_mode(environ: _env.Environ = None) -> str:
    """The agreement mode from ``MWMS_MPI_CHECK`` (``"always"`` when unset), in lower case.

    Raises:
      ValueError: for any other value, naming the variable and the modes.
    """
    return _env.env_choice(CHECK_ENV, CHECK_MODES, "always", environ=environ)


def _site_only() -> CallContext:
    """The context of a call made outside any public API, in ``callsite`` mode."""
    return ("", "", "", "", "", call_context.user_site())


class _Ids:
    """Communicator ids, agreed among a communicator's ranks when it is built."""

    next = 0


class Agreement:
    """The per-call agreement of one communicator, on its own duplicated MPI communicator.

    Construction is collective over ``comm``'s ranks: it agrees the check mode, the op
    determinism switch (``config.experimental.enable_op_determinism``; each float SUM agrees it
    again, as part of its layout) and an id for the communicator (the same on every member,
    unique among this process's communicators).

    Args:
      comm: a duplicated mpi4py communicator used for agreements only.
      mpi: the ``mpi4py.MPI`` module.
      name: the owning communicator's name, for messages.

    Raises:
      ValueError: on every rank, if the ranks' ``MWMS_MPI_CHECK`` modes differ.
      InvalidArgumentError: on every rank, if some ranks have op determinism on and others off.
    """

    def __init__(self, comm: Any, mpi: Any, name: str) -> None:
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.name = name
        self.calls = 0  # calls numbered so far; advances when an agreement completes
        self.skipped = 0  # calls numbered without an agreement ("first" mode)
        self._send = np.zeros(4, dtype=np.int64)
        self._recv = np.zeros(4, dtype=np.int64)
        self._out = self._send.data  # item access on a memoryview is ~4x numpy's
        self._in = self._recv.data
        self._max = mpi.MAX
        self._contexts: dict[Any, int] = {}  # context -> its digest, premixed
        self._carries_value = False  # whether the send buffer holds a value to clear
        self._context: CallContext | None = None  # the context of the call being agreed
        self._trusted: dict[int, None] = {}  # "first" mode: layouts agreed once (FIFO order)
        mode = check_mode()
        self.every_call = mode != "first"
        self.sites = False  # whether fingerprints hold the user's source line
        try:
            self.id = self._agree_construction(mode)
        except Exception:  # raised on every rank, so the collective Free matches
            comm.Free()
            raise
        if mode == "callsite":
            self.sites = True
            call_context.want_sites(True)
        try:
            self._persistent: Any = comm.Allreduce_init(self._send, self._recv, mpi.MAX)
        except NotImplementedError:  # an MPI before 4.0: plain calls
            self._persistent = None

    def close(self) -> None:
        """Frees the persistent request and the agreement communicator (not after a poisoning:
        a request may be in flight then, and freeing could hang)."""
        if self._persistent is not None:
            self._persistent.Free()
            self._persistent = None
        if self.sites:
            self.sites = False
            call_context.want_sites(False)
        self.comm.Free()

    def _agree_construction(self, mode: str) -> int:
        first = CHECK_MODES.index(mode)
        exact = int(_config.switches.op_determinism)
        send = np.array([first, -first, _Ids.next, -_Ids.next, exact, -exact], dtype=np.int64)
        recv = np.empty(6, dtype=np.int64)
        self.comm.Allreduce(send, recv, self._max)
        if recv[0] != -recv[1]:
            raise ValueError(
                f"communicator {self.name} on rank {self.rank}: ranks disagree about "
                f"{CHECK_ENV} (this rank: {mode!r}); set it the same on every rank"
            )
        if recv[4] != -recv[5]:
            state = "on" if exact else "off"
            raise errors.InvalidArgumentError(
                None,
                "Communicator",
                f"communicator {self.name} on rank {self.rank}: ranks disagree about op "
                f"determinism (this rank: {state}); call "
                "mwms_mpi.config.experimental.enable_op_determinism() on every rank, or on none",
                rank=self.rank,
            )
        comm_id = int(recv[2])
        _Ids.next = comm_id + 1
        return comm_id

    # -- one agreement -----------------------------------------------------------------------

    def agree_now(
        self,
        op_name: str,
        layout_digest: int,
        layout: Layout,
        context: CallContext | None,
        value: int = 0,
    ) -> tuple[int, int]:
        """:meth:`start` (blocking) and :meth:`finish` in one: the per-call hot path.

        Returns:
          The ranks' values' (minimum, maximum).

        Raises:
          InvalidArgumentError: on every rank, if any rank's fingerprint differs.
        """
        if context is None and self.sites:
            context = _site_only()
        mixed = self._contexts.get(context)
        if mixed is None:
            mixed = self._context_digest(context)
        f = layout_digest ^ mixed ^ (self.calls + 1)  # each below 2**62: see _context_digest
        out = self._out
        out[0] = f
        out[1] = -f
        if value or self._carries_value:
            out[2] = value
            out[3] = -value
            self._carries_value = value != 0
        request = self._persistent
        if request is None:  # before MPI 4.0: Iallreduce on every path (see _started)
            request = self.comm.Iallreduce(self._send, self._recv, self._max)
        else:
            request.Start()
        request.Wait()
        self.calls += 1
        got = self._in
        if got[0] != -got[1]:
            self._mismatch(op_name, Signature(self.calls, layout, self._agreed(context), ""))
        return -got[3], got[2]

    def _context_digest(self, context: CallContext | None) -> int:
        """The context's digest, mixed and cached (a handful of contexts recur per program).

        Cached by the context itself, whose structure text stands for the value's nested
        structure: a plain array's is ``""``, so the 4 KB path pays one dict lookup. A call
        site is left out unless this agreement runs in ``callsite`` mode (another communicator
        may have asked for sites).

        A fingerprint is ``layout digest ^ context digest ^ call number``, all below ``2**62``,
        so it stays there with no masking per call (a multiplication and a mask of Python's
        big integers cost 0.19 us a call, a sixth of the agreement's Python at 4 KB). The
        context's digest is multiplied by a constant first, once, here: a context whose text
        digests like the layout's would otherwise cancel it out.
        """
        if len(self._contexts) >= _MAX_CONTEXTS:
            self._contexts.clear()
        mixed = digest(self._agreed(context)) * _MIX_CONTEXT & _MASK
        self._contexts[context] = mixed
        return mixed

    def _agreed(self, context: CallContext | None) -> CallContext | None:
        """The part of ``context`` this agreement agrees: without its site unless in
        ``callsite`` mode."""
        if context is None or self.sites or not context[5]:
            return context
        return (*context[:5], "")

    def start(
        self, layout_digest: int, context: CallContext | None, value: int, blocking: bool
    ) -> Any:
        """Starts the agreement of the next call; returns the request to poll, or ``None``.

        Args:
          layout_digest: the call's layout digest (``signature.digest``), cached by the caller.
          context: what the user called (``call_context.current()``).
          value: this rank's contribution to agree on (``|value| < 2**62``), else 0.
          blocking: complete it before returning (no deadline).
        """
        if context is None and self.sites:
            context = _site_only()
        self._context = context
        mixed = self._contexts.get(context)
        if mixed is None:
            mixed = self._context_digest(context)
        f = layout_digest ^ mixed ^ (self.calls + 1)  # each below 2**62: see _context_digest
        out = self._out
        out[0] = f
        out[1] = -f
        out[2] = value
        out[3] = -value
        self._carries_value = value != 0
        request = self._started()
        if blocking:
            request.Wait()
            return None
        return request

    def _started(self) -> Any:
        """The agreement's all-reduce of the send buffer, started: the persistent request, or
        before MPI 4.0 an ``Iallreduce`` on every path, with or without a deadline (a blocking
        call on one rank and a nonblocking one on another do not match in MPI)."""
        request = self._persistent
        if request is None:
            return self.comm.Iallreduce(self._send, self._recv, self._max)
        request.Start()
        return request

    def finish(self, op_name: str, layout: Layout) -> tuple[int, int]:
        """Completes the call's agreement: the values' (min, max), or the mismatch error.

        Raises:
          InvalidArgumentError: on every rank, if any rank's fingerprint differs.
        """
        self.calls += 1
        got = self._in
        if got[0] != -got[1]:
            context = self._agreed(self._context)
            self._mismatch(op_name, Signature(self.calls, layout, context, ""))
        return -got[3], got[2]

    def skip(self) -> None:
        """Numbers a call made without an agreement (``MWMS_MPI_CHECK=first``, seen layout)."""
        self.calls += 1
        self.skipped += 1

    @property
    def agreements(self) -> int:
        """The agreements completed: fewer than the calls in ``first`` mode (counted by the
        skips, off the per-call path)."""
        return self.calls - self.skipped

    def trusts(self, layout_digest: int) -> bool:
        """Whether ``MWMS_MPI_CHECK=first`` trusts this layout (agreed once on this rank)."""
        return layout_digest in self._trusted

    def trust(self, layout_digest: int) -> None:
        """Records an agreed layout for ``MWMS_MPI_CHECK=first`` (FIFO, :data:`_MAX_TRUSTED`)."""
        trusted = self._trusted
        if len(trusted) >= _MAX_TRUSTED:
            del trusted[next(iter(trusted))]
        trusted[layout_digest] = None

    def invalid_digest(self, error: Exception) -> int:
        """The layout digest a rank contributes when its own arguments are invalid."""
        return digest(("invalid", type(error).__name__, str(error)))

    def finish_refusal(self, op_name: str, error: Exception) -> NoReturn:
        """Completes the agreement of a call whose arguments this rank found invalid.

        Raises:
          The original ``error`` on this rank (with a note naming what the others called), or,
          when every rank found the same error, that error alone.
        """
        self.calls += 1
        got = self._in
        if got[0] == -got[1]:  # every rank refused the call for the same reason
            raise error
        text = f"{type(error).__name__}: {error}"
        context = self._agreed(self._context)
        self._mismatch(op_name, Signature(self.calls, None, context, text), error)

    def _mismatch(self, op_name: str, mine: Signature, error: Exception | None = None) -> NoReturn:
        # Every rank completed the agreement, so every rank makes this (pickled) exchange.
        signatures = self.comm.allgather(mine)
        context = mine.context
        what = context[0] if context is not None else op_name
        message = mismatch_message(what, self.rank, signatures, self.name)
        if error is not None:
            error.add_note(message)
            raise error
        raise errors.InvalidArgumentError(None, op_name, message, rank=self.rank)

    # -- after an agreement ------------------------------------------------------------------

    def exchange_counts(
        self, count: int, blocking: bool
    ) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
        """Starts the exchange of each rank's count (only after an agreed call said they differ).

        Returns:
          The request to poll (``None`` when blocking), and the (send, table) buffers, which
          must stay alive until it completes; the table holds each rank's count.
        """
        send = np.array([count], dtype=np.int64)
        table = np.empty(self.size, dtype=np.int64)
        if blocking:
            self.comm.Allgather(send, table)
            return None, (send, table)
        return self.comm.Iallgather(send, table), (send, table)
