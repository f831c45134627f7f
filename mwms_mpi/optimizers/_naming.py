"""Keras's default optimizer names (``keras.src.utils.naming.auto_name``).

An optimizer made without a name is named after its class in snake case (``SGD`` ->
``sgd``, ``RMSprop`` -> ``rm_sprop``), with ``_1``, ``_2``, ... for the later ones of the
same name in the process, as Keras counts them. The name prefixes the step counter's name
(``adam/iteration``, ``adam_1/iteration``), so two optimizers' variables stay apart.
"""

from __future__ import annotations

import collections
import re
import threading

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
