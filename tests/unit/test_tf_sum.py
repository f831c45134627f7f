"""``mwms_mpi._tf_sum.reduce_sum_all`` adds in TF's CPU order: the sums equal TF 2.21's bits.

TF's outputs are pinned in ``tf_sum_pins.json`` beside this file (its ``about`` holds the
recording program). The sizes cross every boundary of Eigen's order: the packet (8 float16 or
float32, 4 float64 lanes), the four-packet groups, and the leaf of 1024 packets that is split in
two.
numpy's pairwise sum differs from TF on some of them, which is what this module is for.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mwms_mpi._tf_sum import reduce_sum_all, reduce_sum_last

PINS = json.loads((Path(__file__).parent / "tf_sum_pins.json").read_text())["sums"]


def _values(n: int, dtype: str) -> np.ndarray:
    k = np.arange(n, dtype=np.float64)
    return (((k * 7919) % 1009) / 97 - 5).astype(dtype) ** 3


@pytest.mark.parametrize("key", sorted(PINS))
def test_tf_bits(key: str) -> None:
    dtype, size = key.split("/")
    x = _values(37 * 53, dtype).reshape(37, 53) if size == "37x53" else _values(int(size), dtype)
    total = reduce_sum_all(x)
    assert total.dtype == np.dtype(dtype) and total.shape == ()
    assert float(total).hex() == PINS[key]


def test_numpy_differs_where_the_order_matters() -> None:
    """The pins would not all pass with numpy's own sum (else this module would be moot)."""
    differs = [
        key
        for key in PINS
        if "x" not in key.split("/")[1]
        and float(np.sum(_values(int(key.split("/")[1]), key.split("/")[0]))).hex() != PINS[key]
    ]
    assert differs


def test_other_dtypes_sum_in_their_own_dtype() -> None:
    assert reduce_sum_all(np.array([1, 2, 3], np.int8)).dtype == np.int8
    assert reduce_sum_all(np.array([200, 100], np.uint8)).item() == 44
    assert float(reduce_sum_all(np.zeros((0, 3), np.float32))) == 0.0


def test_the_sums_that_use_it_give_tf_bits() -> None:
    """``nn.compute_average_loss`` and ``Strategy.reduce(..., axis=0)`` of 1,000 float32 values:
    TF 2.21 printed these (numpy's pairwise order gave ...a70p+2 and ...432p+12)."""
    import mwms_mpi.distribute
    from mwms_mpi import nn

    x = _values(1000, "float32")
    assert float(nn.compute_average_loss(x, global_batch_size=1000)).hex() == "0x1.590a6e0000000p+2"
    strategy = mwms_mpi.distribute.get_strategy()
    assert float(strategy.reduce("SUM", x, axis=0)).hex() == "0x1.50f4300000000p+12"
    assert float(strategy.reduce("MEAN", x, axis=0)).hex() == "0x1.590a6e0000000p+2"


# TF 2.21's tf.reduce_sum(x, axis=-1) of x = _values(6 * 37, dtype).reshape(6, 37) (numpy's
# sum differs in rows 1, 3 and 4 for float16, and in most rows for float32 and float64).
ROWS = {
    "float16": ["0x1.e24p+7", "0x1.138p+8", "0x1.ecp+7", "0x1.a2cp+6", "0x1.e04p+5", "0x1.ec8p+7"],
    "float32": [
        "0x1.e27f7cp+7",
        "0x1.12fb6ep+8",
        "0x1.ec094p+7",
        "0x1.a2e324p+6",
        "0x1.ded524p+5",
        "0x1.ed1b9ep+7",
    ],
    "float64": [
        "0x1.e27f7c20879p+7",
        "0x1.12fb6e69c2206p+8",
        "0x1.ec093cbca7b91p+7",
        "0x1.a2e322047f0fbp+6",
        "0x1.ded518866a538p+5",
        "0x1.ed1b95f83883bp+7",
    ],
}


@pytest.mark.parametrize("dtype", sorted(ROWS))
def test_rows_are_summed_as_tf_sums_the_last_axis(dtype: str) -> None:
    rows = reduce_sum_last(_values(6 * 37, dtype).reshape(6, 37))
    assert rows.dtype == np.dtype(dtype) and rows.shape == (6,)
    assert [float(v).hex() for v in rows] == [float.fromhex(h).hex() for h in ROWS[dtype]]


# TF 2.21's tf.reduce_sum of float16 NaNs of both signs (numpy's float16 addition keeps the
# second NaN where TF's keeps the first, except where TF folds its four packet accumulators).
_P, _N = float("nan"), -float("nan")
NANS = {
    "tail": ([_P, _N], "007e"),
    "packet_then_tail": ([_P] + [1] * 7 + [_N], "00fe"),
    "two_packets": ([_P] + [1] * 7 + [_N] + [1] * 7, "007e"),
    "four_accumulators": ([_P] + [1] * 7 + [_N] + [1] * 23, "00fe"),
    "lanes": ([_P, 1, _N] + [1] * 5, "007e"),
    "groups": ([_P] + [1] * 7 + [_N] + [1] * 31, "00fe"),
}


@pytest.mark.parametrize("case", sorted(NANS))
def test_float16_nans_are_tfs(case: str) -> None:
    values, expected = NANS[case]
    assert reduce_sum_all(np.array(values, np.float16)).tobytes().hex() == expected
