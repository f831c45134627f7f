"""``tf.train.CheckpointOptions``: TF's constructor, fields and checks.

Saving here is synchronous and local, so ``enable_async`` (and its older name) and
``experimental_io_device`` change nothing observable: the files hold the values at the call,
as TF's asynchronous save guarantees, and ``Checkpoint.sync()`` has nothing to wait for.
The options that would change what is written or restored are refused rather than ignored:
write callbacks, a sharding callback and skipping the slot variables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class CheckpointOptions:
    """Options for ``Checkpoint.save``/``write``/``read``/``restore``, as TF's.

    Args:
      experimental_io_device: the device TF would do the file I/O on; files are written by
        this process here, so it has no effect.
      experimental_enable_async_checkpoint: TF's older name for ``enable_async``.
      experimental_write_callbacks: refused unless ``None``.
      enable_async: accepted; saves are synchronous (the same files, written before return).
      experimental_skip_slot_variables: refused unless ``False``.
      experimental_sharding_callback: refused unless ``None``.

    Raises:
      NotImplementedError: for the options that would change what is saved or restored.
    """

    def __init__(
        self,
        experimental_io_device: str | None = None,
        experimental_enable_async_checkpoint: bool = False,
        experimental_write_callbacks: Sequence[Callable[..., Any]] | None = None,
        enable_async: bool = False,
        experimental_skip_slot_variables: bool = False,
        experimental_sharding_callback: Any = None,
    ) -> None:
        refused = {
            "experimental_write_callbacks": experimental_write_callbacks is not None,
            "experimental_skip_slot_variables": bool(experimental_skip_slot_variables),
            "experimental_sharding_callback": experimental_sharding_callback is not None,
        }
        if any(refused.values()):
            names = ", ".join(name for name, given in refused.items() if given)
            raise NotImplementedError(
                f"CheckpointOptions({names}=...): mwms_mpi's checkpoints implement neither "
                "write callbacks, sharding callbacks nor skipping slot variables; leave them "
                "at their defaults."
            )
        self.experimental_io_device = experimental_io_device
        self.enable_async = experimental_enable_async_checkpoint or enable_async
        self.experimental_enable_async_checkpoint = self.enable_async
        self.experimental_write_callbacks = experimental_write_callbacks
        self.experimental_sharding_callback = experimental_sharding_callback
        self.experimental_skip_slot_variables = experimental_skip_slot_variables


def checked(options: Any, read_first: str = "experimental_enable_async_checkpoint") -> Any:
    """``options`` as TF takes it: a false value (``None``) means the defaults; anything else
    is used as an options object, so one without the option TF reads first (``read_first``)
    raises TF's (Python's) ``AttributeError`` before anything is done."""
    options = options or CheckpointOptions()
    getattr(options, read_first)
    return options
