"""How TF 2.21 writes dtypes, shapes, tensors and kernel nodes in its error messages: one home
for the texts every layer's TF-exact errors are built from (conversion, packing, kernels).

Imports ``_arrays`` alone, so that ``_constant`` and ``_autopack``, which import each other's
neighbours, can both use it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _arrays

_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_KERNEL_NAMES = {"float32": "float", "float64": "double", "float16": "half"}


def tf_api_dtype_name(dtype: Any) -> str:
    """A numpy dtype by TF's Python name for it (``tf.DType.name``), as TF's Python-side
    messages say: numpy's name (``float32``), but ``string`` for bytes and unicode."""
    dtype = np.dtype(dtype)
    return "string" if dtype.kind in "SU" else dtype.name


def tf_dtype_name(dtype: Any) -> str:
    """A numpy dtype by TF's kernel name for it (``DataTypeString``), as TF's op messages say:
    ``float32`` is ``float``, ``float64`` ``double``, ``float16`` ``half``, bytes and unicode
    ``string``; other names are numpy's, which are TF's (``int32``, ``bool``)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "SU":
        return "string"
    return _KERNEL_NAMES.get(dtype.name, dtype.name)


def tf_cpu_node(op: str) -> str:
    """The prefix of an eager TF 2.21 kernel error raised on the CPU, as TF writes it for
    ``op``: ``{{function_node __wrapped__Sub_device_/job:localhost/...}} ``."""
    return f"{{{{function_node __wrapped__{op}_device_{_CPU0}}}}} "


def tf_shape_string(shape: Any) -> str:
    """A shape as TF's op messages write it (``TensorShape::DebugString``): ``[3,2]``, ``[]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def tensor_repr(array: Any) -> str:
    """An array as TF's ``repr`` of the eager tensor it stands for (``<tf.Tensor: shape=(),
    dtype=int32, numpy=1>``): a scalar as its Python value, else numpy's ``repr`` (on a line of
    its own when it takes several); bytes and unicode are ``string``."""
    host = np.asarray(_arrays.to_host(array))
    text = repr(host.item()) if host.ndim == 0 else repr(host)
    if "\n" in text:
        text = "\n" + text
    return f"<tf.Tensor: shape={host.shape}, dtype={tf_api_dtype_name(host.dtype)}, numpy={text}>"
