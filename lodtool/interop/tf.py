"""TensorFlow bridge: LoD tensors as ``tf.RaggedTensor`` (one row-splits tensor per LoD level) and back.

A LoD level's offsets are exactly TensorFlow's ``row_splits``, so
:func:`to_ragged_tensor` is ``tf.RaggedTensor.from_nested_row_splits(data,
offsets)`` and :func:`from_ragged_tensor` reads ``flat_values`` and
``nested_row_splits`` back.  Both copy: TensorFlow owns its buffers.
TensorFlow is imported on first use (``pip install 'lodtool[tf]'``).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> t = LoDTensor(np.arange(5, dtype=np.int32), [[0, 2, 3], [0, 1, 3, 5]])
>>> rt = to_ragged_tensor(t)
>>> rt.to_list()
[[[0], [1, 2]], [[3, 4]]]
>>> from_ragged_tensor(rt).equals(t)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LodBackendError, LodUsageError
from ..tensor import LoDTensor


def _tf():
    try:
        import tensorflow
    except ImportError:  # pragma: no cover - depends on the environment
        raise LodBackendError("the TensorFlow bridge needs tensorflow: pip install 'lodtool[tf]'") from None
    return tensorflow


def to_ragged_tensor(t: LoDTensor, *, row_splits_dtype: str = "int64"):
    """``t`` as a ``tf.RaggedTensor`` (a dense ``tf.Tensor`` for a 0-level tensor); copies into TensorFlow.

    The element shape becomes uniform inner dimensions of ``flat_values``.
    ``row_splits_dtype="int32"`` is TensorFlow's other choice (up to 2**31 - 1
    rows per level).  The LoD is not checked again (a LoDTensor is valid).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> rt = to_ragged_tensor(LoDTensor(np.zeros((3, 2), np.float32), [[0, 1, 3]]))
    >>> rt.shape.as_list(), rt.ragged_rank
    ([2, None, 2], 1)
    """
    tf = _tf()
    if row_splits_dtype not in ("int64", "int32"):
        raise LodUsageError(f"row_splits_dtype must be int64 or int32, got {row_splits_dtype!r}")
    t = t.to("cpu")
    values = tf.convert_to_tensor(np.asarray(t.data))
    if not t.lod_level:
        return values
    splits_dtype = np.dtype(row_splits_dtype)
    if splits_dtype == np.int32 and any(int(o[-1]) > np.iinfo(np.int32).max for o in t.offsets):
        raise LodUsageError("the offsets do not fit int32 row splits; use row_splits_dtype='int64'")
    splits = [tf.convert_to_tensor(np.asarray(o, splits_dtype)) for o in t.offsets]
    return tf.RaggedTensor.from_nested_row_splits(values, splits, validate=False)


def from_ragged_tensor(rt: Any, *, validate: bool = True) -> LoDTensor:
    """A LoD tensor from a ``tf.RaggedTensor`` (or a dense ``tf.Tensor``, as 0 levels); copies out of TensorFlow.

    Each ragged dimension becomes a LoD level (int32 splits are widened); the
    uniform dimensions under the last one become the element shape.

    >>> import tensorflow as tf
    >>> t = from_ragged_tensor(tf.ragged.constant([[1.5], [], [2.5, 3.5]]))
    >>> t.lod, t.data.tolist()
    ([[0, 1, 1, 3]], [1.5, 2.5, 3.5])
    """
    tf = _tf()
    if isinstance(rt, tf.RaggedTensor):
        data = np.asarray(rt.flat_values.numpy())
        offsets = [np.asarray(s.numpy(), np.int64) for s in rt.nested_row_splits]
    elif isinstance(rt, tf.Tensor):
        data, offsets = np.asarray(rt.numpy()), []
    else:
        raise LodUsageError(f"from_ragged_tensor takes a tf.RaggedTensor or tf.Tensor, got {type(rt).__name__}")
    if data.ndim == 0:
        data = data.reshape(1)
    if validate:
        return LoDTensor(data, lod=offsets)
    return LoDTensor._trusted(data, offsets)


__all__ = ["to_ragged_tensor", "from_ragged_tensor"]
