"""``tf.Module.submodules`` / ``non_trainable_variables`` and ``sync`` of ``tf.train.Checkpoint``
and ``CheckpointManager``, as TF 2.21 gives them::

    class A(tf.Module):  # w = Variable(1.0, name="w"); s = Variable(2.0, trainable=False, name="s")
    class B(tf.Module):  # z (non-trainable), inner = [A("a1"), {"k": A("a2")}], t
    [m.name for m in b.submodules]                # ['a1', 'a2']
    [v.name for v in b.non_trainable_variables]  # ['z:0', 's:0', 's:0']
    [v.name for v in b.trainable_variables]      # ['t:0', 'w:0', 'w:0']
    tf.train.Checkpoint(b=b).sync(), CheckpointManager(ckpt, d, 2).sync()  # None, None
"""

from __future__ import annotations

from pathlib import Path

import mwms_mpi
from mwms_mpi import train


class A(mwms_mpi.Module):
    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        self.w = mwms_mpi.Variable(1.0, name="w")
        self.s = mwms_mpi.Variable(2.0, trainable=False, name="s")


class B(mwms_mpi.Module):
    def __init__(self) -> None:
        super().__init__()
        self.z = mwms_mpi.Variable(3.0, trainable=False, name="z")
        self.inner = [A("a1"), {"k": A("a2")}]
        self.t = mwms_mpi.Variable(4.0, name="t")


def test_submodules_and_non_trainable_variables() -> None:
    b = B()
    assert [m.name for m in b.submodules] == ["a1", "a2"]
    assert [v.name for v in b.non_trainable_variables] == ["z:0", "s:0", "s:0"]
    assert [v.name for v in b.trainable_variables] == ["t:0", "w:0", "w:0"]


def test_sync_returns_none(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(b=B())
    manager = train.CheckpointManager(ckpt, str(tmp_path), 2)
    manager.save()
    assert ckpt.sync() is None and manager.sync() is None
