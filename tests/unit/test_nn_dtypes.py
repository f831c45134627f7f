"""``nn.compute_average_loss`` divides as TF's ``div_no_nan``: integer losses average into floats.

TF 2.21 (``tf.nn.compute_average_loss(tf.constant([1, 2, 4], dt), global_batch_size=4)``):
int8/uint8/int16 give float32 1.75, int32/int64 float64 1.75 (TF's ``truediv`` dtypes); a batch
of 0 gives 0.0 of that dtype; int32 losses weighted by [0.5, 1, 2] give float64 2.5 (the
weighted losses are cast back to int32 first); a bool loss raises ``InvalidArgumentError``.
The result was cast back to the integer dtype: 1, silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mwms_mpi import errors, nn

INTEGER_AVERAGES = [
    ("int8", np.float32),
    ("uint8", np.float32),
    ("int16", np.float32),
    ("int32", np.float64),
    ("int64", np.float64),
]


def _jnp() -> Any:
    return pytest.importorskip("jax", reason="the [jax] extra is not installed").numpy


@pytest.mark.parametrize(("dtype", "result"), INTEGER_AVERAGES)
@pytest.mark.parametrize("library", ["numpy", "jax"])
def test_integer_losses_average_into_tfs_float_dtype(dtype: str, result: Any, library: str) -> None:
    if library == "jax" and result == np.float64:
        pytest.skip("JAX has float64 only with jax_enable_x64, a process-wide switch")
    xp = np if library == "numpy" else _jnp()
    losses = xp.asarray(np.array([1, 2, 4], dtype))
    got = nn.compute_average_loss(losses, global_batch_size=4)
    assert np.dtype(got.dtype) == result and float(got) == 1.75
    zero = nn.compute_average_loss(losses, global_batch_size=0)
    assert np.dtype(zero.dtype) == result and float(zero) == 0.0
    weighted = nn.compute_average_loss(losses, sample_weight=[0.5, 1.0, 2.0], global_batch_size=4)
    assert np.dtype(weighted.dtype) == result and float(weighted) == 2.5


def test_floating_losses_keep_their_dtype() -> None:
    for dtype in (np.float16, np.float32, np.float64):
        got = nn.compute_average_loss(np.array([1, 2, 4], dtype), global_batch_size=4)
        assert got.dtype == dtype and float(got) == 1.75


def test_a_bool_loss_is_refused_as_tf() -> None:
    with pytest.raises(errors.InvalidArgumentError, match="Value for attr 'T' of bool"):
        nn.compute_average_loss(np.array([True, False]), global_batch_size=2)


@pytest.mark.parametrize(
    ("losses", "weights", "message"),
    [
        ((3,), (2,), r"Incompatible shapes: \[3\] vs\. \[2\] \[Op:Mul\]"),
        ((3,), (3, 2), r"Can not squeeze dim\[1\], expected a dimension of 1, got 2"),
        ((3, 4), (3, 5), r"Incompatible shapes: \[3,4\] vs\. \[3,5\] \[Op:Mul\]"),
    ],
)
def test_sample_weights_that_do_not_fit_raise_tfs_error(
    losses: tuple[int, ...], weights: tuple[int, ...], message: str
) -> None:
    # TF 2.21: InvalidArgumentError from its Mul or Squeeze (ours raised numpy's ValueError)
    with pytest.raises(errors.InvalidArgumentError, match=message):
        nn.compute_average_loss(
            np.ones(losses, np.float32), sample_weight=np.ones(weights), global_batch_size=3
        )
