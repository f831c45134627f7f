"""Keras's automatic names (``keras.src.utils.naming.auto_name``), one counter per process.

An object made without a name is named after its class in snake case (``SGD`` -> ``sgd``,
``RMSprop`` -> ``rm_sprop``, ``MyMetric`` -> ``my_metric``), with ``_1``, ``_2``, ... for the
later ones of the same name in the process. Keras counts every prefix in one table, whatever
made it (an optimizer, a metric, a metric's variable), and so does this module: the metrics
and the optimizers both name themselves here.

The numbers count what this process made, so they are rank-local: a chief that made one more
``SGD()`` (say, for its own evaluation) names the next one ``sgd_1`` where the other workers
name it ``sgd``. TF agrees nothing about names; here a variable's creation is agreed by its name
(``distribute/variable_creation.py``), so that agreement uses :func:`agreed_name`, in which a
name this module numbered counts as its un-numbered prefix.
"""

from __future__ import annotations

import collections
import re
import threading

_uids: collections.Counter[str] = collections.Counter()
_uids_lock = threading.Lock()
_numbered: dict[str, str] = {}  # every numbered name made here -> its prefix ("sgd_1" -> "sgd")


def auto_name(prefix: str) -> str:
    """Keras's ``auto_name``: the snake-case ``prefix``, numbered from its second use in this
    process (``"my_metric"``, ``"my_metric_1"``, ...)."""
    name = re.sub(r"\W+", "", prefix)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
    with _uids_lock:
        count = _uids[name]
        _uids[name] += 1
        if not count:
            return name
        _numbered[f"{name}_{count}"] = name
    return f"{name}_{count}"


def agreed_name(name: str) -> str:
    """``name`` with each ``/``-separated part this process's :func:`auto_name` numbered
    replaced by its prefix (``sgd_1/iteration`` -> ``sgd/iteration``): the part of a name that
    does not rest on how many such objects this rank made before."""
    return "/".join(_numbered.get(part, part) for part in name.split("/"))
