"""The strategy as the lower modules of ``distribute/`` see it, as Protocols.

``distribute_lib.Strategy`` builds a ``StrategyExtended`` and ``ReplicaContext`` objects, so
``strategy_extended`` and ``replica_context`` cannot import ``distribute_lib`` to name the type
of the strategy they hold: that would be an import cycle, even under ``TYPE_CHECKING``
(``scripts/lint_layers.py`` refuses it). They name these Protocols instead. Each extends the
``mwms_mpi._context`` protocol that the layers below use and adds only what the modules of
``distribute/`` use besides; ``Strategy`` and ``StrategyExtended`` satisfy them structurally,
which mypy checks wherever a strategy is passed as one.
"""

from __future__ import annotations

from typing import Any, Protocol

from mwms_mpi import _context
from mwms_mpi.collective import Communicator
from mwms_mpi.types import CommunicationOptions

__all__ = ["ExtendedProtocol", "StrategyProtocol"]


class ExtendedProtocol(_context.ExtendedLike, Protocol):
    """``strategy.extended`` as ``ReplicaContext`` uses it (``StrategyExtended`` satisfies it).

    Attributes:
      _communicator: the communicator across workers, or ``None``: the one a replica-context
        collective names itself to (``collective.call_context.api_call``).
    """

    _communicator: Communicator | None

    @property
    def worker_devices(self) -> tuple[str, ...]:
        """``tf.distribute.StrategyExtended.worker_devices``."""
        ...

    def _gather_to(
        self, value: Any, destinations: Any, axis: int, options: CommunicationOptions | None = None
    ) -> Any:
        """TF's ``StrategyExtended._gather_to``: the all-gather behind ``ReplicaContext``'s."""
        ...


class StrategyProtocol(_context.StrategyLike, Protocol):
    """A ``tf.distribute.Strategy`` as ``StrategyExtended`` and ``ReplicaContext`` hold it."""

    @property
    def extended(self) -> ExtendedProtocol:
        """``tf.distribute.Strategy.extended``."""
        ...
