"""Reductions and loss helpers against TF 2.21, bit for bit (a differential fuzz's findings).

Every expected value below is TF 2.21's output for the same program, pinned as bytes.
"""

from __future__ import annotations

import numpy as np

from mwms_mpi import nn


def test_scale_regularization_loss_adds_in_tfs_order() -> None:
    # tf.nn.scale_regularization_loss(tf.constant(x)) outside a strategy: TF's reduce_sum
    # order gives 0x401e8999d68e1e50; numpy's pairwise sum gave one ulp more (...1e51).
    x = np.frombuffer(
        bytes.fromhex("aa769c32847b1bc081e8384861ff02c04f14559f5e0d2a403ac139dd22d40e40"),
        np.float64,
    ).reshape(2, 2)
    got = nn.scale_regularization_loss(x)
    assert got.dtype == np.float64 and got.shape == ()
    assert got.tobytes().hex() == "501e8ed699891e40"
