"""The public names of mwms_mpi.distribute (+ experimental, cluster_resolver) are TF 2.21's.

``tf_public_names.json`` was generated from real TensorFlow 2.21 (never from this package) with::

    TF_CPP_MIN_LOG_LEVEL=3 /tmp/tfvenv/bin/python -c 'import json, tensorflow as tf; \\
      print(json.dumps({m: sorted(n for n in dir(eval("tf." + m)) if not n.startswith("_")) \\
      for m in ("distribute", "distribute.experimental", "distribute.cluster_resolver")}, \\
      indent=1, sort_keys=True))' > tests/unit/tf_public_names.json

The test fails when a name appears or disappears on either side without this file saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

import mwms_mpi.distribute
import mwms_mpi.distribute.cluster_resolver
import mwms_mpi.distribute.experimental

TF_NAMES = json.loads((Path(__file__).with_name("tf_public_names.json")).read_text())

# TF names we deliberately do not provide (yet), with the reason.
NOT_YET: dict[str, set[str]] = {
    "distribute": {
        # other strategies and TF runtime pieces, out of scope:
        "OneDeviceStrategy",
        "ParameterServerStrategy",
        "Server",
        "TPUStrategy",
        "coordinator",
    },
    "distribute.experimental": {
        "CentralStorageStrategy",
        "CollectiveHints",
        "ParameterServerStrategy",
        "PreemptionWatcher",
        "TPUStrategy",
        "coordinator",
        "partitioners",
        "rpc",
    },
    "distribute.cluster_resolver": {
        "GCEClusterResolver",
        "KubernetesClusterResolver",
        "KubernetesExecutableLocation",
        "TPUClusterResolver",
    },
}

# Our names TF does not have at these paths (docs/architecture.md, "Where each TF concept lives").
EXTRAS: dict[str, set[str]] = {
    "distribute": {"Mirrored", "PerReplica", "get_cross_replica_context"},
    "distribute.experimental": {"ElasticHandler"},
    "distribute.cluster_resolver": {"MPIClusterResolver", "UnionClusterResolver"},
}

MODULES: dict[str, ModuleType] = {
    "distribute": mwms_mpi.distribute,
    "distribute.experimental": mwms_mpi.distribute.experimental,
    "distribute.cluster_resolver": mwms_mpi.distribute.cluster_resolver,
}


def _public(module: ModuleType) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_") and n != "annotations"}


@pytest.mark.parametrize("path", sorted(MODULES))
def test_public_names_are_tfs_minus_not_yet_plus_extras(path: str) -> None:
    tf_names = set(TF_NAMES[path])
    assert NOT_YET[path] <= tf_names, "a 'not yet' name TF does not have"
    assert not EXTRAS[path] & tf_names, "an 'extra' that TF has: move it out of EXTRAS"
    expected = (tf_names - NOT_YET[path]) | EXTRAS[path]
    ours = _public(MODULES[path])
    submodules = {n for n in ours if isinstance(getattr(MODULES[path], n), ModuleType)}
    assert ours - (submodules - tf_names) == expected


@pytest.mark.parametrize("path", sorted(MODULES))
def test_all_lists_exactly_the_public_names(path: str) -> None:
    module = MODULES[path]
    assert set(module.__all__) == (set(TF_NAMES[path]) - NOT_YET[path]) | EXTRAS[path]
