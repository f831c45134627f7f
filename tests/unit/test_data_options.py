"""mwms_mpi.data.Options and AutoShardPolicy against literal TF 2.21 outputs.

Produced with /tmp/tfvenv/bin/python (tensorflow-cpu 2.21.0), e.g.
``tf.data.Dataset.range(3).with_options(o1).with_options(o2).options()``.
"""

from __future__ import annotations

import logging
import re

import pytest

from mwms_mpi.data import Dataset, Options
from mwms_mpi.data.experimental import AutoShardPolicy, DistributeOptions


def test_auto_shard_policy_values_like_tf() -> None:
    # TF: {'AUTO': 0, 'FILE': 1, 'DATA': 2, 'OFF': -1, 'HINT': 3}; repr '<AutoShardPolicy.DATA: 2>'
    assert {p.name: int(p) for p in AutoShardPolicy} == {
        "OFF": -1,
        "AUTO": 0,
        "FILE": 1,
        "DATA": 2,
        "HINT": 3,
    }
    assert repr(AutoShardPolicy.DATA) == "<AutoShardPolicy.DATA: 2>"


def test_options_defaults_and_propagation() -> None:
    # TF: (AutoShardPolicy.AUTO, None, None) and Options() == Options()
    options = Options()
    assert options.experimental_distribute.auto_shard_policy is AutoShardPolicy.AUTO
    assert options.experimental_distribute.num_devices is None
    assert options.deterministic is None
    assert Options() == Options()
    assert isinstance(options.experimental_distribute, DistributeOptions)
    off = Options()
    off.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    # TF: with_options(off).map(...).batch(2) keeps OFF (-1)
    ds = Dataset.range(3).with_options(off).map(lambda x: x).batch(2)
    assert ds.options().experimental_distribute.auto_shard_policy is AutoShardPolicy.OFF
    assert Dataset.range(3).options() == Options()


def test_options_merge_like_tf(caplog: pytest.LogCaptureFixture) -> None:
    off = Options()
    off.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    nondet = Options()
    nondet.deterministic = False
    # TF: (<AutoShardPolicy.OFF: -1>, False): fields set in either survive
    merged = Dataset.range(3).with_options(off).with_options(nondet).options()
    assert merged.experimental_distribute.auto_shard_policy is AutoShardPolicy.OFF
    assert merged.deterministic is False
    data = Options()
    data.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    # TF: later wins (2), logging "Changing the value of option auto_shard_policy from
    # <AutoShardPolicy.OFF: -1> to <AutoShardPolicy.DATA: 2>."
    with caplog.at_level(logging.WARNING):
        merged = Dataset.range(3).with_options(off).with_options(data).options()
    assert merged.experimental_distribute.auto_shard_policy is AutoShardPolicy.DATA
    assert "Changing the value of option auto_shard_policy" in caplog.text
    assert off.experimental_distribute.auto_shard_policy is AutoShardPolicy.OFF  # not mutated


def test_options_errors_like_tf() -> None:
    # TF: AttributeError 'Cannot set the property foo on Options.'
    with pytest.raises(AttributeError, match=re.escape("Cannot set the property foo on Options.")):
        Options().foo = 1
    # TF: TypeError 'Property "auto_shard_policy" must be of type <enum 'AutoShardPolicy'>, got: 5
    # (type: <class 'int'>)'
    with pytest.raises(TypeError, match='Property "auto_shard_policy" must be of type'):
        Options().experimental_distribute.auto_shard_policy = 5
    with pytest.raises(TypeError, match=r"got: DATA \(type: <class 'str'>\)"):
        Options().experimental_distribute.auto_shard_policy = "DATA"
    # TF: AttributeError "'int' object has no attribute '_to_proto'"
    with pytest.raises(AttributeError, match="_to_proto"):
        Dataset.range(3).with_options(5)  # type: ignore[arg-type]
