"""TF 2.21's (and Keras 3.15.1's) classes and functions, member by member, against ours.

For each pair in ``PAIRS`` (the TF names mwms_mpi mirrors), ``tf_signatures.json`` beside this
file holds TF's public members (no leading underscore) and the parameters of every callable
one: names, order, kinds and defaults (as ``repr``). It was generated from real TF (never from
this package) by this very file, run as a script with TF's Python::

    TF_CPP_MIN_LOG_LEVEL=3 /tmp/tfvenv/bin/python tests/unit/test_tf_signatures.py \\
      > tests/unit/tf_signatures.json

The test describes our counterpart the same way and fails on any difference not listed in
``DIFFERENT`` (a signature or kind that differs on purpose) or ``NOT_YET`` (a TF member we do
not provide), each with its reason; a listed entry that no longer differs fails too. A TF
signature of only ``(*args, **kwargs)`` (a wrapper TF does not unwrap) says nothing and is not
compared. Our extra members are not checked here.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

PAIRS = {
    "distribute": "Strategy MirroredStrategy MultiWorkerMirroredStrategy StrategyExtended "
    "ReplicaContext InputContext InputOptions InputReplicationMode ReduceOp RunOptions "
    "DistributedValues DistributedDataset DistributedIterator CrossDeviceOps "
    "HierarchicalCopyAllReduce NcclAllReduce ReductionToOneDevice get_strategy has_strategy "
    "in_cross_replica_context get_replica_context experimental_set_strategy",
    "distribute.experimental": "CommunicationOptions CommunicationImplementation "
    "CollectiveCommunication MultiWorkerMirroredStrategy PreemptionCheckpointHandler "
    "TerminationConfig ValueContext",
    "distribute.cluster_resolver": "ClusterResolver SimpleClusterResolver SlurmClusterResolver "
    "TFConfigClusterResolver UnionResolver",
    "": "Variable IndexedSlices Module VariableAggregation VariableSynchronization TensorSpec",
    "train": "ClusterSpec Checkpoint CheckpointManager CheckpointOptions latest_checkpoint",
    "data": "Dataset Options",
    "data.experimental": "DistributeOptions AutoShardPolicy AutotuneAlgorithm AutotuneOptions "
    "ExternalStatePolicy OptimizationOptions ServiceOptions ThreadingOptions",
    "nn": "compute_average_loss scale_regularization_loss",
    "nest": "assert_same_structure flatten is_nested map_structure pack_sequence_as",
    "config.experimental": "enable_op_determinism",
    "keras.optimizers": "Optimizer SGD Adam AdamW RMSprop Adagrad",
    "keras.optimizers.schedules": "LearningRateSchedule CosineDecay CosineDecayRestarts "
    "ExponentialDecay InverseTimeDecay PiecewiseConstantDecay PolynomialDecay",
    "keras.metrics": "Metric Mean Sum Accuracy CategoricalAccuracy SparseCategoricalAccuracy "
    "MeanSquaredError MeanMetricWrapper categorical_accuracy sparse_categorical_accuracy "
    "mean_squared_error",
    # TF's tensorflow.python.distribute.values, ours mwms_mpi.values:
    "values": "DistributedVariable MirroredVariable SyncOnReadVariable Mirrored PerReplica",
}

_MADE_BY_THE_STRATEGY = "made by the strategy, never by users: TF's is an abstract interface"
_VAR_POLICY = "made by the strategy; TF's var_policy (its internal variable policy) has none here"

# (pair, member) -> why ours differs from TF's on purpose; "()" is the constructor or function.
DIFFERENT: dict[tuple[str, str], str] = {
    ("TensorSpec", "()"): "numpy.float32 is tf.float32 (docs/architecture.md: arrays are tensors)",
    ("data.Dataset", "()"): "made by the Dataset methods: TF's takes a variant tensor",
    ("data.Dataset", "counter"): "dtype=np.int64 stands for tf.int64 (arrays are tensors)",
    ("distribute.DistributedDataset", "()"): _MADE_BY_THE_STRATEGY,
    ("distribute.DistributedIterator", "()"): _MADE_BY_THE_STRATEGY,
    ("distribute.DistributedValues", "()"): _MADE_BY_THE_STRATEGY,
    ("distribute.DistributedIterator", "get_next"): "TF's implementation's name=None, too",
    ("values.DistributedVariable", "()"): _VAR_POLICY,
    ("values.MirroredVariable", "()"): _VAR_POLICY,
    ("values.SyncOnReadVariable", "()"): _VAR_POLICY,
}


def _why(reason: str, names: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), reason)


_GRAPH = _why(
    "graph mode, protos and sessions: everything here is eager",
    "SaveSliceInfo eval from_proto graph initialized_value initializer load op set_shape to_proto",
)
_VARIABLE = (
    _GRAPH
    | _why("deprecated in TF 2.21", "count_up_to experimental_ref")
    | _why("not yet: TF's N-d gather/scatter kernels", "gather_nd scatter_nd_add scatter_nd_sub")
    | _why("not yet: TF's N-d gather/scatter kernels", "scatter_nd_update sparse_read")
)
_DISTRIBUTED_VARIABLE = _VARIABLE | _why(
    "TF's resource handle and internal flags", "handle is_distributed_variable is_initialized"
)
_CONFIG_PROTO = _why("TF's session ConfigProto: there is no session", "update_config_proto")
_KERAS_CONFIG = _why("not yet: Keras serialization", "from_config get_config")
_METRIC = _KERAS_CONFIG | _why(
    "not yet: Keras's stateless (JAX-style) API",
    "stateless_reset_state stateless_result stateless_update_state",
)
_OPTIMIZER = (
    _KERAS_CONFIG
    | _why(
        "not yet: Keras's API for writing optimizers and its stateless and weight-file API",
        "add_optimizer_variables add_variable add_variable_from_reference assign assign_add "
        "assign_sub finalize_variable_values load_own_variables save_own_variables set_weights "
        "stateless_apply update_step",
    )
    | _why("not yet: each replica's loss_scale_factor is applied to the gradients", "scale_loss")
)

# pair -> TF members we do not provide, and why.
NOT_YET: dict[str, dict[str, str]] = {
    "Variable": _VARIABLE,
    "values.DistributedVariable": _DISTRIBUTED_VARIABLE,
    "values.MirroredVariable": _DISTRIBUTED_VARIABLE,
    "values.SyncOnReadVariable": _DISTRIBUTED_VARIABLE,
    "IndexedSlices": _why("graph mode: everything here is eager", "consumers graph op"),
    "TensorSpec": _why(
        "not yet: TF's TypeSpec machinery (protos, tracing types, supertypes)",
        "cast experimental_as_proto experimental_from_proto experimental_type_proto flatten "
        "from_spec from_tensors is_subtype_of most_specific_common_supertype "
        "most_specific_compatible_type placeholder_value to_tensors value_type",
    ),
    "data.Dataset": _why(
        "not yet: tf.data outside the subset a training loop needs (docs/architecture.md)",
        "fingerprint list_files load ragged_batch save snapshot sparse_batch",
    )
    | _why(
        "not yet: an element's error ends the pipeline's generators (docs/input_semantics.md)",
        "ignore_errors",
    ),
    **dict.fromkeys(
        [
            "distribute.Strategy",
            "distribute.MirroredStrategy",
            "distribute.MultiWorkerMirroredStrategy",
            "distribute.experimental.MultiWorkerMirroredStrategy",
        ],
        _CONFIG_PROTO,
    ),
    **{
        f"keras.metrics.{m}": _METRIC
        for m in PAIRS["keras.metrics"].split()
        if m[0].isupper()  # the classes
    },
    **{f"keras.optimizers.{o}": _OPTIMIZER for o in PAIRS["keras.optimizers"].split()},
    **{
        f"keras.optimizers.schedules.{c}": _KERAS_CONFIG
        for c in PAIRS["keras.optimizers.schedules"].split()
    },
}


def params(fn: Any, drop_self: bool = False) -> str | None:
    """``fn``'s parameters as one string: names, kinds (``*``, ``/``) and defaults' reprs."""
    try:
        sig = inspect.signature(fn)
        kinds = [p.kind for p in sig.parameters.values() if p.name != "self"]
        if kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            sig = inspect.signature(inspect.unwrap(fn))
    except (TypeError, ValueError):
        return None
    out, star, ps = [], False, list(sig.parameters.values())
    if drop_self and ps and ps[0].name == "self":
        ps = ps[1:]
    for i, p in enumerate(ps):
        if p.kind is p.VAR_POSITIONAL:
            star, text = True, "*" + p.name
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name
        else:
            if p.kind is p.KEYWORD_ONLY and not star:
                star = True
                out.append("*")
            text = p.name
            if p.default is not p.empty:
                text += "=" + re.sub(r" at 0x[0-9a-f]+", "", repr(p.default))
        out.append(text)
        last_positional_only = i + 1 == len(ps) or ps[i + 1].kind is not p.POSITIONAL_ONLY
        if p.kind is p.POSITIONAL_ONLY and last_positional_only:
            out.append("/")
    return "(" + ", ".join(out) + ")"


def member(cls: type, name: str) -> str:
    """A class member's kind: ``data`` (attribute or property), ``enum <value>``,
    ``method(...)``, ``classmethod(...)``, ``staticmethod(...)`` or ``callable``."""
    raw = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)
    if isinstance(raw, enum.Enum):
        return "enum " + repr(raw.value)
    if isinstance(raw, classmethod | staticmethod):
        return type(raw).__name__ + str(params(getattr(cls, name)))
    if inspect.isfunction(raw) or inspect.ismethoddescriptor(raw):
        return "method" + str(params(raw))
    if raw is None or isinstance(raw, property) or not callable(raw):
        return "data"
    return "callable"


def describe(obj: Any) -> dict[str, str | None]:
    """``{"()": parameters, member: kind}`` of a class, ``{"()": parameters}`` of a function."""
    if not inspect.isclass(obj):
        return {"()": params(obj)}
    init = None if issubclass(obj, enum.Enum) else params(obj)
    if init == "(*args, **kwargs)":
        init = params(obj.__init__, drop_self=True)
    out: dict[str, str | None] = {"()": init}
    for name in dir(obj):
        if not name.startswith("_"):
            out[name] = member(obj, name)
    return out


_SAYS_NOTHING = re.compile(r"\((self, )?\*args, \*\*kwargs\)$")


def _ours(key: str) -> Any:
    """Our counterpart of TF's ``key``: the same path under mwms_mpi (Keras's without
    ``keras.``; ``tf.TensorSpec`` is ``mwms_mpi.data.TensorSpec``)."""
    path = key.removeprefix("keras.")
    path = "data.TensorSpec" if path == "TensorSpec" else path
    module, _, name = ("mwms_mpi." + path).rpartition(".")
    return getattr(importlib.import_module(module), name)


def _instance_has(key: str, name: str) -> bool:
    """Options keep their fields per instance (TF: properties of the class)."""
    cls = _ours(key)
    return cls.__name__.endswith("Options") and hasattr(cls(), name)


def test_members_and_signatures_are_tfs() -> None:
    pins = json.loads(Path(__file__).with_name("tf_signatures.json").read_text())["tf"]
    assert set(pins) == {f"{m}.{n}".lstrip(".") for m, ns in PAIRS.items() for n in ns.split()}
    problems, used = [], set()
    for key, tf_members in sorted(pins.items()):
        ours = describe(_ours(key))
        for name, tf_kind in sorted(tf_members.items()):
            if name not in ours:
                if _instance_has(key, name):
                    continue
                if name in NOT_YET.get(key, {}):
                    used.add((key, name))
                    continue
                problems.append(f"{key}.{name}: TF {tf_kind}, ours missing")
            elif tf_kind != ours[name] and not _SAYS_NOTHING.search(str(tf_kind)):
                if (key, name) in DIFFERENT:
                    used.add((key, name))
                    continue
                problems.append(f"{key}.{name}: TF {tf_kind}, ours {ours[name]}")
    listed = set(DIFFERENT) | {(k, n) for k, names in NOT_YET.items() for n in names}
    problems += [f"{k}.{n}: listed, but no longer differs" for k, n in sorted(listed - used)]
    assert not problems, "\n".join(problems)


if __name__ == "__main__":  # TF's side (TF's Python): print tf_signatures.json
    import keras  # type: ignore[import-not-found]
    import tensorflow as tf  # type: ignore[import-not-found]
    from tensorflow.python.distribute import values  # type: ignore[import-not-found]

    found = {}
    for module, names in PAIRS.items():
        base: Any = values if module == "values" else keras if module.startswith("keras") else tf
        parts = [] if module in ("", "values") else module.split(".")
        for part in parts[1:] if module.startswith("keras") else parts:
            base = getattr(base, part)
        for name in names.split():
            found[f"{module}.{name}".lstrip(".")] = describe(getattr(base, name))
    about = f"TensorFlow {tf.__version__}, Keras {keras.__version__}"
    print(json.dumps({"about": about, "tf": found}, indent=0, sort_keys=True))
