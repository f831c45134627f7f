"""``tf.data.Options`` for the subset distribution reads, with TF's set-tracking and merge rule."""

from __future__ import annotations

import enum
import logging
from typing import Any, ClassVar

__all__ = [
    "AutoShardPolicy",
    "AutotuneAlgorithm",
    "AutotuneOptions",
    "DistributeOptions",
    "ExternalStatePolicy",
    "OptimizationOptions",
    "Options",
    "ServiceOptions",
    "ThreadingOptions",
]

_LOG = logging.getLogger(__name__)


class AutoShardPolicy(enum.IntEnum):
    """How ``experimental_distribute_dataset`` shards a dataset across workers (TF's values).

    * ``OFF``: no sharding; every worker sees every element.
    * ``AUTO``: shard by files if the pipeline reads files, else by data (here: always DATA,
      since mwms_mpi datasets never read files).
    * ``FILE``: shard by input files; a pipeline without file readers fails with
      ``NotFoundError`` when iterated.
    * ``DATA``: every worker runs the whole pipeline and keeps its own share of the output.
    * ``HINT``: shard where ``SHARD_HINT`` placeholders are used (there are none here, so this
      does not shard).
    """

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _OptionsBase:
    """Options whose fields remember whether they were set, so that merging can prefer those."""

    _DEFAULTS: ClassVar[dict[str, Any]] = {}
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = {}

    def __init__(self) -> None:
        object.__setattr__(self, "_set", {})
        for name, default in self._DEFAULTS.items():
            if isinstance(default, type):  # a nested options class: one fresh instance each
                self._set[name] = default()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._DEFAULTS:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return self.__dict__["_set"].get(name, self._DEFAULTS[name])

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._DEFAULTS:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}.")
        expected = self._TYPES[name]
        if value is not None and not isinstance(value, expected):
            raise TypeError(
                f'Property "{name}" must be of type {expected}, got: {value} (type: {type(value)})'
            )
        self._set[name] = value

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _OptionsBase)
        return all(getattr(self, n) == getattr(other, n) for n in self._DEFAULTS)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def _is_set(self, name: str) -> bool:
        value = self._set.get(name)
        if isinstance(value, _OptionsBase):
            return any(value._is_set(n) for n in value._DEFAULTS)
        return name in self._set

    def _merge_into(self, result: _OptionsBase) -> None:
        for name in self._DEFAULTS:
            mine = self._set.get(name)
            if isinstance(mine, _OptionsBase):
                theirs = result._set[name]
                assert isinstance(theirs, _OptionsBase)
                mine._merge_into(theirs)
            elif name in self._set:
                if result._is_set(name) and getattr(result, name) != mine:
                    _LOG.warning(
                        "Changing the value of option %s from %r to %r.",
                        name,
                        getattr(result, name),
                        mine,
                    )
                result._set[name] = mine

    def _copy(self) -> Any:
        clone = type(self)()
        self._merge_into(clone)
        return clone

    def merge(self, options: Any) -> Any:
        """Merges itself with the given ``options``; a field set in ``options`` wins.

        Args:
          options: The options to merge into the current options.

        Returns:
          New options with the merged fields.
        """
        if type(options) is not type(self):
            raise TypeError(
                f"Arguments must be of type {type(self).__name__}, got: {type(options).__name__}"
            )
        result = self._copy()
        options._merge_into(result)
        return result

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._DEFAULTS)
        return f"{type(self).__name__}({fields})"


class DistributeOptions(_OptionsBase):
    """Options for distributing a dataset: ``auto_shard_policy`` and ``num_devices``.

    Attributes:
      auto_shard_policy: the ``AutoShardPolicy`` that ``experimental_distribute_dataset`` uses
        to shard this dataset across workers. Default ``AutoShardPolicy.AUTO``.
      num_devices: the number of devices attached to this input pipeline (read by TF only for
        tf.data service). Default ``None``.
    """

    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "auto_shard_policy": AutoShardPolicy.AUTO,
        "num_devices": None,
    }
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = {
        "auto_shard_policy": AutoShardPolicy,
        "num_devices": int,
    }


class AutotuneAlgorithm(enum.Enum):
    """TF's autotuning algorithms (its values); accepted, without an effect here."""

    DEFAULT = 0
    HILL_CLIMB = 1
    GRADIENT_DESCENT = 2
    MAX_PARALLELISM = 3
    STAGE_BASED = 4


class ExternalStatePolicy(enum.Enum):
    """TF's policies for functions with external state (its values); accepted, no effect."""

    WARN = 0
    IGNORE = 1
    FAIL = 2


class AutotuneOptions(_OptionsBase):
    """TF's autotuning options: kept, set and merged as TF's, without an effect (nothing is
    tuned here: a pipeline runs in the training loop's thread)."""

    _DEFAULTS: ClassVar[dict[str, Any]] = dict.fromkeys(
        (
            "autotune_algorithm",
            "cpu_budget",
            "enabled",
            "initial_parallelism",
            "min_parallelism",
            "ram_budget",
        )
    )
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = {
        "autotune_algorithm": AutotuneAlgorithm,
        "cpu_budget": int,
        "enabled": bool,
        "initial_parallelism": int,
        "min_parallelism": int,
        "ram_budget": int,
    }


_GRAPH_REWRITES = (
    "apply_default_optimizations",
    "filter_fusion",
    "filter_parallelization",
    "inject_prefetch",
    "map_and_batch_fusion",
    "map_and_filter_fusion",
    "map_fusion",
    "map_parallelization",
    "noop_elimination",
    "parallel_batch",
    "seq_interleave_prefetch",
    "shuffle_and_repeat_fusion",
)


class OptimizationOptions(_OptionsBase):
    """TF's graph-rewrite switches, all booleans: kept without an effect (TF's rewrites keep
    the elements; there is no graph to rewrite here)."""

    _DEFAULTS: ClassVar[dict[str, Any]] = dict.fromkeys(_GRAPH_REWRITES)
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = dict.fromkeys(_GRAPH_REWRITES, bool)


class ServiceOptions(_OptionsBase):
    """TF's tf.data service options (``pinned``): kept, there is no tf.data service here."""

    _DEFAULTS: ClassVar[dict[str, Any]] = {"pinned": None}
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = {"pinned": bool}


class ThreadingOptions(_OptionsBase):
    """TF's threading options: kept without an effect (no thread pools here)."""

    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "max_intra_op_parallelism": None,
        "private_threadpool_size": None,
    }
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = dict.fromkeys(_DEFAULTS, int)


# TF's deprecated spellings of two fields (``Options.__getattribute__``/``__setattr__``).
_ALIASES = {"experimental_threading": "threading", "experimental_deterministic": "deterministic"}


class Options(_OptionsBase):
    """Options of a dataset, as ``tf.data.Options``; set them with ``Dataset.with_options``.

    Attributes:
      deterministic: whether elements must come in a deterministic order (always true here;
        kept for TF's API). Default ``None``. ``experimental_deterministic`` is TF's older
        name for it.
      experimental_distribute: the ``DistributeOptions`` of the dataset.
      autotune, experimental_optimization, experimental_service, threading (older name:
        ``experimental_threading``, with TF's deprecation warning) and the other fields:
        TF's, kept, set and merged as TF does, without an effect on the elements.
    """

    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "autotune": AutotuneOptions,
        "dataset_name": None,
        "deterministic": None,
        "experimental_distribute": DistributeOptions,
        "experimental_external_state_policy": None,
        "experimental_optimization": OptimizationOptions,
        "experimental_service": ServiceOptions,
        "experimental_slack": None,
        "experimental_symbolic_checkpoint": None,
        "experimental_warm_start": None,
        "framework_type": None,
        "threading": ThreadingOptions,
    }
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = {
        "autotune": AutotuneOptions,
        "dataset_name": str,
        "deterministic": bool,
        "experimental_distribute": DistributeOptions,
        "experimental_external_state_policy": ExternalStatePolicy,
        "experimental_optimization": OptimizationOptions,
        "experimental_service": ServiceOptions,
        "experimental_slack": bool,
        "experimental_symbolic_checkpoint": bool,
        "experimental_warm_start": bool,
        "framework_type": list,
        "threading": ThreadingOptions,
    }

    def __getattr__(self, name: str) -> Any:
        if name == "experimental_threading":
            _LOG.warning(
                "options.experimental_threading is deprecated. Use options.threading instead."
            )
        return super().__getattr__(_ALIASES.get(name, name))

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "experimental_threading":
            _LOG.warning(
                "options.experimental_threading is deprecated. Use options.threading instead."
            )
        super().__setattr__(_ALIASES.get(name, name), value)
