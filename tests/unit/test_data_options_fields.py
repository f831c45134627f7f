"""Every field of TF 2.21's ``tf.data.Options`` and its sub-options is there (each was an
``AttributeError`` here but ``deterministic`` and ``experimental_distribute``), with TF's
defaults, type checks, aliases and merge. TF 2.21::

    o = tf.data.Options(); o.experimental_threading.private_threadpool_size = 3
    o.threading.private_threadpool_size, o.threading is o.experimental_threading  # 3 True
    o.experimental_deterministic = False; o.deterministic  # False
    o.merge(tf.data.Options()).threading.private_threadpool_size  # 3
    o.experimental_slack = 1  # TypeError Property "experimental_slack" must be of type
                              #   <class 'bool'>, got: 1 (type: <class 'int'>)
    [(m.name, m.value) for m in tf.data.experimental.AutotuneAlgorithm]
      # DEFAULT 0, HILL_CLIMB 1, GRADIENT_DESCENT 2, MAX_PARALLELISM 3, STAGE_BASED 4
    [(m.name, m.value) for m in tf.data.experimental.ExternalStatePolicy]  # WARN 0 IGNORE 1 FAIL 2
"""

from __future__ import annotations

import re

import pytest

from mwms_mpi import data
from mwms_mpi.data import experimental


def test_defaults_are_none_and_sub_options_are_fresh() -> None:
    o = data.Options()
    for name in [
        "dataset_name",
        "experimental_external_state_policy",
        "experimental_slack",
        "experimental_symbolic_checkpoint",
        "experimental_warm_start",
        "framework_type",
        "deterministic",
    ]:
        assert getattr(o, name) is None
    assert isinstance(o.threading, experimental.ThreadingOptions)
    assert o.threading is not data.Options().threading
    assert o.autotune.enabled is None and o.autotune.autotune_algorithm is None
    assert o.experimental_optimization.map_parallelization is None
    assert o.experimental_service.pinned is None


def test_aliases_merge_and_types() -> None:
    o = data.Options()
    o.experimental_threading.private_threadpool_size = 3
    assert o.threading.private_threadpool_size == 3 and o.threading is o.experimental_threading
    o.experimental_deterministic = False
    assert o.deterministic is False
    o.autotune.autotune_algorithm = experimental.AutotuneAlgorithm.HILL_CLIMB
    o.experimental_optimization.map_fusion = True
    merged = o.merge(data.Options())
    assert merged.threading.private_threadpool_size == 3
    assert merged.autotune.autotune_algorithm is experimental.AutotuneAlgorithm.HILL_CLIMB
    assert merged.experimental_optimization.map_fusion is True
    with pytest.raises(
        TypeError,
        match=re.escape(
            "Property \"experimental_slack\" must be of type <class 'bool'>, "
            "got: 1 (type: <class 'int'>)"
        ),
    ):
        o.experimental_slack = 1
    ds = data.Dataset.range(3).with_options(o)
    assert [int(x) for x in ds.as_numpy_iterator()] == [0, 1, 2]


def test_enums() -> None:
    assert [(m.name, m.value) for m in experimental.AutotuneAlgorithm] == [
        ("DEFAULT", 0), ("HILL_CLIMB", 1), ("GRADIENT_DESCENT", 2), ("MAX_PARALLELISM", 3),
        ("STAGE_BASED", 4),
    ]  # fmt: skip
    assert [(m.name, m.value) for m in experimental.ExternalStatePolicy] == [
        ("WARN", 0), ("IGNORE", 1), ("FAIL", 2),
    ]  # fmt: skip
