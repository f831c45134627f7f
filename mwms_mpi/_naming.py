"""Keras's automatic names (``keras.src.utils.naming.auto_name``), one counter per process.

An object made without a name is named after its class in snake case (``SGD`` -> ``sgd``,
``RMSprop`` -> ``rm_sprop``, ``MyMetric`` -> ``my_metric``), with ``_1``, ``_2``, ... for the
later ones of the same name in the process. Keras counts every prefix in one table, whatever
made it (an optimizer, a metric, a metric's variable), and so does this module: the metrics
and the optimizers both name themselves here.
"""

from __future__ import annotations

import collections
import re
import threading

_uids: collections.Counter[str] = collections.Counter()
_uids_lock = threading.Lock()


def auto_name(prefix: str) -> str:
    """Keras's ``auto_name``: the snake-case ``prefix``, numbered from its second use in this
    process (``"my_metric"``, ``"my_metric_1"``, ...)."""
    name = re.sub(r"\W+", "", prefix)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
    with _uids_lock:
        count = _uids[name]
        _uids[name] += 1
    return f"{name}_{count}" if count else name
