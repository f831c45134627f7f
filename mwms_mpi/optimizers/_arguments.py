"""Keras's rules for the optimizers' constructor arguments: the base arguments every
optimizer hands on, and the checks of the EMA and accumulation settings. (The default names
are Keras's ``auto_name``: ``mwms_mpi/_naming.py``; an optimizer's name prefixes its step
counter's, ``adam/iteration``, ``adam_1/iteration``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keras's base optimizer arguments, in Keras's order. Every optimizer's signature spells them
# out after its own (so that a positional call binds as in Keras) and hands them on by keyword.
BASE_ARGUMENTS = (
    "weight_decay",
    "clipnorm",
    "clipvalue",
    "global_clipnorm",
    "use_ema",
    "ema_momentum",
    "ema_overwrite_frequency",
    "loss_scale_factor",
    "gradient_accumulation_steps",
    "name",
)


def base_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The base arguments out of a constructor's ``locals()``, for ``super().__init__``."""
    return {name: arguments[name] for name in BASE_ARGUMENTS}


def check_keras_ranges(
    use_ema: bool, ema_momentum: float, ema_overwrite_frequency: Any, accumulation: Any
) -> None:
    """Keras's checks of the EMA and accumulation arguments, in its order.

    Raises:
      ValueError: Keras's messages.
    """
    if accumulation and not accumulation >= 2:
        raise ValueError(
            "`gradient_accumulation_steps` must be an integer >= 2. Received: "
            f"gradient_accumulation_steps={accumulation}"
        )
    if use_ema:
        if ema_momentum > 1 or ema_momentum < 0:
            raise ValueError(
                f"`ema_momentum` must be in the range [0, 1]. Received: ema_momentum={ema_momentum}"
            )
        if ema_overwrite_frequency and (
            not isinstance(ema_overwrite_frequency, int) or ema_overwrite_frequency < 1
        ):
            raise ValueError(
                "`ema_overwrite_frequency` must be an integer >= 1 or None. Received: "
                f"ema_overwrite_frequency={ema_overwrite_frequency}"
            )
