"""``tf.train.CheckpointOptions`` (TF 2.21): fields and defaults, ``enable_async`` and its
older name, and saving with it. TF 2.21::

    o = tf.train.CheckpointOptions()
    {n: getattr(o, n) for n in public names}  # enable_async False,
      # experimental_enable_async_checkpoint False, experimental_io_device None,
      # experimental_sharding_callback None, experimental_skip_slot_variables False,
      # experimental_write_callbacks None
    o2 = tf.train.CheckpointOptions(enable_async=True)
    o2.experimental_enable_async_checkpoint, o2.enable_async  # True True
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mwms_mpi
from mwms_mpi import train


def test_defaults_and_async_alias() -> None:
    o = train.CheckpointOptions()
    assert {n: getattr(o, n) for n in dir(o) if not n.startswith("_")} == {
        "enable_async": False,
        "experimental_enable_async_checkpoint": False,
        "experimental_io_device": None,
        "experimental_sharding_callback": None,
        "experimental_skip_slot_variables": False,
        "experimental_write_callbacks": None,
    }
    for kwargs in ({"enable_async": True}, {"experimental_enable_async_checkpoint": True}):
        o = train.CheckpointOptions(**kwargs)
        assert o.enable_async is o.experimental_enable_async_checkpoint is True


def test_save_and_restore_with_options(tmp_path: Path) -> None:
    v = mwms_mpi.Variable([1.0, 2.0])
    ckpt = train.Checkpoint(v=v)
    options = train.CheckpointOptions(experimental_io_device="/job:localhost", enable_async=True)
    path = ckpt.save(str(tmp_path / "ckpt"), options=options)
    ckpt.sync()
    v.assign([5.0, 6.0])
    ckpt.restore(path, options=options)
    assert v.numpy().tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"experimental_write_callbacks": [lambda: None]},
        {"experimental_skip_slot_variables": True},
        {"experimental_sharding_callback": object()},
    ],
)
def test_what_would_change_the_files_is_refused(kwargs: dict) -> None:
    with pytest.raises(NotImplementedError, match=next(iter(kwargs))):
        train.CheckpointOptions(**kwargs)
