"""TFConfigClusterResolver, SimpleClusterResolver and UnionClusterResolver pinned to TF 2.21.

Expected values come from running the same calls on real TF once:
/tmp/tfvenv/bin/python with TF_CONFIG set as in each test and
tf.distribute.cluster_resolver.TFConfigClusterResolver() / SimpleClusterResolver / UnionResolver.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

from mwms_mpi.distribute.cluster_resolver import (
    ClusterResolver,
    SimpleClusterResolver,
    TFConfigClusterResolver,
    UnionClusterResolver,
    UnionResolver,
)
from mwms_mpi.train import ClusterSpec


@pytest.fixture
def tf_config(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def set_config(value: object) -> None:
        if value is None:
            monkeypatch.delenv("TF_CONFIG", raising=False)
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            monkeypatch.setenv("TF_CONFIG", text)

    return set_config


CHIEF_WORKERS = {
    "cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]},
    "task": {"type": "worker", "index": 1},
}


def test_tfconfig_chief_and_workers(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(CHIEF_WORKERS)
    r = TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == ("worker", 1, None, None)
    assert r.master() == "w1:2222"
    assert r.master("chief", 0) == "c:2222"
    assert r.master(rpc_layer="grpc") == "grpc://w1:2222"
    assert r.num_accelerators() == {}
    with pytest.raises(ValueError, match=r"^No such job in cluster: 'ps'$"):
        r.master("ps", 0)


def test_tfconfig_overrides(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(CHIEF_WORKERS)
    task_id: Any = "0"  # TF converts with int()
    r = TFConfigClusterResolver(
        task_type="chief", task_id=task_id, rpc_layer="grpc", environment="google"
    )
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == ("chief", 0, "grpc", "google")
    assert r.master() == "grpc://c:2222"
    r.task_type = 5  # type: ignore[assignment]
    assert r.task_type == "5"  # TF: str(self._task_type)


def test_tfconfig_one_worker_rpc_and_environment_key(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(
        {
            "cluster": {"worker": ["w0:2222"]},
            "task": {"type": "worker", "index": 0},
            "rpc_layer": "grpc",
            "environment": "google",
        }
    )
    r = TFConfigClusterResolver()
    assert r.master() == ""  # the only task in the cluster
    assert r.rpc_layer == "grpc"
    assert r.environment is None  # TF never reads "environment" from TF_CONFIG


def test_tfconfig_session_master_and_string_index(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(
        {
            "cluster": {"worker": ["w0:2222", "w1:2222"]},
            "task": {"type": "worker", "index": "1"},
            "rpc_layer": "grpc",
            "session_master": "sm:1",
        }
    )
    r = TFConfigClusterResolver()
    assert r.task_id == 1
    assert r.master() == "sm:1"
    assert r.master(rpc_layer="x") == "sm:1"


def test_tfconfig_rpc_layer_in_master(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(
        {
            "cluster": {"worker": ["w0:2222", "w1:2222"]},
            "task": {"type": "worker", "index": 1},
            "rpc_layer": "grpc",
        }
    )
    r = TFConfigClusterResolver()
    assert r.master() == "grpc://w1:2222"
    assert r.master(rpc_layer="") == "w1:2222"


def test_tfconfig_missing_task(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config({"cluster": {"worker": ["w0:2222", "w1:2222"]}})
    r = TFConfigClusterResolver()
    assert (r.task_type, r.task_id) == (None, None)
    with pytest.raises(ValueError, match=r"^No such job in cluster: None$"):
        r.master()
    tf_config({"cluster": {"worker": ["w0:2222", "w1:2222"]}, "task": {"type": "worker"}})
    assert r.task_id is None
    with pytest.raises(ValueError, match=r"^No task with index None in job 'worker'$"):
        r.master()


def test_tfconfig_unset(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(None)
    r = TFConfigClusterResolver()
    assert r.cluster_spec() == ClusterSpec({})
    assert (r.task_type, r.task_id, r.rpc_layer, r.master()) == (None, None, None, "")


def test_tfconfig_bad_json_fails_on_use(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config("{bad json")
    r = TFConfigClusterResolver()  # TF: construction succeeds
    with pytest.raises(json.JSONDecodeError, match="Expecting property name enclosed in double"):
        r.cluster_spec()
    with pytest.raises(ValueError):  # JSONDecodeError is a ValueError
        _ = r.task_type
    tf_config("")
    with pytest.raises(json.JSONDecodeError, match="Expecting value: line 1 column 1"):
        r.cluster_spec()
    tf_config("[1, 2]")
    assert r.cluster_spec() == ClusterSpec({})
    assert r.task_type is None


def test_tfconfig_bad_values(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config({"cluster": {"worker": "w0"}, "task": {"type": "worker", "index": "x"}})
    r = TFConfigClusterResolver()
    with pytest.raises(TypeError, match="The tasks for job 'worker' must be a list"):
        r.cluster_spec()
    with pytest.raises(ValueError, match="invalid literal for int"):
        _ = r.task_id
    tf_config({"task": {"type": "worker", "index": 0}, "cluster": None})
    with pytest.raises(TypeError, match="`cluster` must be a dictionary"):
        r.cluster_spec()


def test_tfconfig_evaluator(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config(
        {
            "cluster": {"worker": ["w0:1"], "evaluator": ["e:1"]},
            "task": {"type": "evaluator", "index": 0},
        }
    )
    r = TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {"worker": ["w0:1"], "evaluator": ["e:1"]}
    assert r.master() == "e:1"
    tf_config({"cluster": {}, "task": {"type": "evaluator", "index": 0}})
    assert r.cluster_spec() == ClusterSpec({})
    assert (r.master(), r.task_type) == ("", "evaluator")


def test_tfconfig_sparse(tf_config) -> None:  # type: ignore[no-untyped-def]
    tf_config({"cluster": {"worker": {"1": "w1:1"}}, "task": {"type": "worker", "index": 1}})
    r = TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {"worker": {1: "w1:1"}}
    assert r.master() == "w1:1"


CS = ClusterSpec({"worker": ["a:1", "b:1"], "ps": ["p:1"]})


def test_simple() -> None:
    s = SimpleClusterResolver(
        CS, task_type="worker", task_id=1, rpc_layer="grpc", num_accelerators={"GPU": 2}
    )
    assert s.master() == "grpc://"
    assert s.master("ps", 0) == "grpc://p:1"
    assert s.master("ps", 0, rpc_layer="x") == "x://p:1"
    assert s.num_accelerators() == {"GPU": 2}
    assert s.environment == ""
    assert SimpleClusterResolver(CS).num_accelerators() == {}
    assert SimpleClusterResolver(CS).master() == ""
    assert SimpleClusterResolver(CS, master="m:1", rpc_layer="grpc").master() == "grpc://m:1"
    with pytest.raises(ValueError, match=r"^No task with index 3 in job 'ps'$"):
        s.master("ps", 3)
    s.task_type, s.task_id, s.rpc_layer = "ps", 0, None
    assert (s.task_type, s.task_id, s.rpc_layer) == ("ps", 0, None)


def test_simple_errors() -> None:
    with pytest.raises(TypeError, match=r"^cluster_spec must be a `tf.train.ClusterSpec`.$"):
        SimpleClusterResolver({"worker": ["a"]})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^master must be a string.$"):
        SimpleClusterResolver(CS, master=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Can't instantiate abstract class ClusterResolver"):
        ClusterResolver()  # type: ignore[abstract]


def _union_parts() -> tuple[SimpleClusterResolver, SimpleClusterResolver]:
    a = SimpleClusterResolver(
        ClusterSpec({"worker": ["a:1", "b:1"]}),
        task_type="worker",
        task_id=1,
        rpc_layer="grpc",
        num_accelerators={"GPU": 1},
        environment="e1",
        master="m0",
    )
    b = SimpleClusterResolver(
        ClusterSpec({"worker": ["c:1"], "ps": ["p:1"]}), task_type="ps", task_id=0, rpc_layer="x"
    )
    return a, b


def test_union_lists_concatenate() -> None:
    a, b = _union_parts()
    u = UnionResolver(a, b)
    assert UnionResolver is UnionClusterResolver
    assert u.cluster_spec().as_dict() == {"worker": ["a:1", "b:1", "c:1"], "ps": ["p:1"]}
    assert (u.task_type, u.task_id, u.rpc_layer, u.environment) == ("worker", 1, "grpc", "e1")
    assert u.num_accelerators() == {"GPU": 1}
    assert u.master() == "grpc://m0"
    assert u.master("ps", 0) == "p:1"  # TF: only the union's own rpc_layer applies here
    assert u.master(rpc_layer="zz") == "zz://m0"


def test_union_overrides_and_task_id_zero_quirk() -> None:
    a, b = _union_parts()
    u = UnionResolver(a, b, task_type="ps", task_id=0, rpc_layer="r")
    assert u.task_id == 1  # TF: an override of 0 is falsy, the first resolver's value wins
    assert (u.task_type, u.rpc_layer) == ("ps", "r")
    u3 = UnionResolver(a)
    u3.task_id, u3.task_type, u3.rpc_layer = 7, "chief", "q"
    assert (u3.task_type, u3.task_id, u3.rpc_layer) == ("chief", 7, "q")


def test_union_dict_merge() -> None:
    a, b = _union_parts()
    d = SimpleClusterResolver(ClusterSpec({"worker": {1: "d:1"}}))
    e = SimpleClusterResolver(ClusterSpec({"worker": {5: "e:1"}}))
    assert UnionResolver(b, d).cluster_spec().as_dict() == {
        "worker": ["c:1", "d:1"],
        "ps": ["p:1"],
    }
    expected = {"worker": {0: "a:1", 1: "b:1", 5: "e:1"}}
    assert UnionResolver(a, e).cluster_spec().as_dict() == expected
    assert UnionResolver(e, a).cluster_spec().as_dict() == expected
    with pytest.raises(KeyError) as info:
        UnionResolver(a, d).cluster_spec()
    assert info.value.args[0] == "Duplicate keys detected when merging two ClusterSpecs: {1}"


def test_union_errors() -> None:
    a, _ = _union_parts()
    with pytest.raises(ValueError, match=r"^At least one ClusterResolver is required.$"):
        UnionResolver()
    with pytest.raises(
        TypeError, match=r"^All arguments must be a sub-class of `ClusterResolver.`$"
    ):
        UnionResolver(a, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Unexpected kwargs provided \{'foo': 1\}$"):
        UnionResolver(a, foo=1)


def test_tfconfig_num_accelerators_asks_master_first(tf_config) -> None:  # type: ignore[no-untyped-def]
    # TF 2.21's ClusterResolver.num_accelerators calls self.master(task_type, task_id) and
    # returns a defaultdict(int) (empty without local accelerators).
    tf_config({"cluster": {"worker": ["w0:2222", "w1:2222"]}})
    r = TFConfigClusterResolver()
    with pytest.raises(ValueError, match=r"^No such job in cluster: None$"):
        r.num_accelerators()
    with pytest.raises(ValueError, match=r"^No such job in cluster: 'ps'$"):
        r.num_accelerators("ps", 0)
    accelerators = r.num_accelerators("worker", 1)
    assert type(accelerators) is collections.defaultdict
    assert accelerators == {}
    assert accelerators["GPU"] == 0
    tf_config(
        {"cluster": {"worker": ["w0:2222", "w1:2222"]}, "task": {"type": "worker", "index": 5}}
    )
    with pytest.raises(ValueError, match=r"^No task with index 5 in job 'worker'$"):
        r.num_accelerators()
    tf_config({"cluster": {"worker": ["w0:2222"]}, "task": {"type": "ps", "index": 0}})
    assert type(r.num_accelerators()) is collections.defaultdict  # one task: master() is ""
    assert type(UnionResolver(r).num_accelerators()) is collections.defaultdict


def test_tfconfig_session_master_is_returned_as_is(tf_config) -> None:  # type: ignore[no-untyped-def]
    cluster = {"worker": ["w0:2222", "w1:2222"]}
    tf_config({"cluster": cluster, "task": {"type": "worker", "index": 0}, "session_master": 5})
    r = TFConfigClusterResolver()
    assert (type(r.master()), r.master()) == (int, 5)  # TF: the JSON value, not str()
    tf_config({"cluster": cluster, "session_master": ["a", 1]})
    assert r.master() == ["a", 1]
    tf_config({"session_master": ""})
    assert r.master(rpc_layer="grpc") == ""
