"""Keras's rules for the optimizers' constructor arguments: the default names
(``keras.src.utils.naming.auto_name``) and the checks of the EMA and accumulation settings.

An optimizer made without a name is named after its class in snake case (``SGD`` ->
``sgd``, ``RMSprop`` -> ``rm_sprop``), with ``_1``, ``_2``, ... for the later ones of the
same name in the process, as Keras counts them. The name prefixes the step counter's name
(``adam/iteration``, ``adam_1/iteration``), so two optimizers' variables stay apart.
"""

from __future__ import annotations

import collections
import re
import threading
from typing import Any

_COUNTS: collections.defaultdict[str, int] = collections.defaultdict(int)
_LOCK = threading.Lock()


def to_snake_case(name: str) -> str:
    """Keras's ``to_snake_case``, regular expression for regular expression."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def auto_name(prefix: str) -> str:
    """Keras's ``auto_name``: the snake-case prefix, then ``prefix_1``, ``prefix_2``, ..."""
    name = to_snake_case(prefix)
    with _LOCK:
        unique = f"{name}_{_COUNTS[name]}" if name in _COUNTS else name
        _COUNTS[name] += 1
    return unique


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
