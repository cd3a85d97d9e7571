"""TensorFlow bridge: LoD tensors as ``tf.RaggedTensor`` (one row-splits tensor per LoD level) and back.

A LoD level's offsets are exactly TensorFlow's ``row_splits``, so
:func:`to_ragged_tensor` is ``tf.RaggedTensor.from_nested_row_splits(data,
offsets)`` and :func:`from_ragged_tensor` reads ``flat_values`` and
``nested_row_splits`` back.  Both copy: TensorFlow owns its buffers.
:func:`batch_dataset` is a container's training batches as a ``tf.data.Dataset``
(planned as :func:`lodtool.batch_plan` plans them).  TensorFlow is imported on
first use (``pip install 'lodtool[tensorflow]'``).

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

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._optional import optional_import
from ..errors import LodUsageError
from ..tensor import LoDTensor

if TYPE_CHECKING:
    import tensorflow as tf


def _tf():
    return optional_import("tensorflow", "tensorflow", "the TensorFlow bridge")


def to_ragged_tensor(t: LoDTensor, *, row_splits_dtype: str = "int64") -> tf.RaggedTensor | tf.Tensor:
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
    return LoDTensor(data, lod=offsets, validate=validate)


# -- a container's training batches as a tf.data source -----------------------------------------------
#: the outputs of :func:`batch_dataset`
TF_OUTPUTS = ("padded", "ragged", "varlen")
#: what lodtool.tasks.BatchReader reads for each
_READ_AS = {"padded": "padded", "ragged": "jagged-numpy", "varlen": "varlen"}


def batch_signature(output: str, dtype: Any, element_shape: tuple[int, ...] = (),
                    ) -> dict[str, tuple[tuple[int | None, ...], np.dtype]]:
    """``{name: (shape, dtype)}`` of the arrays in each batch of :func:`batch_dataset` (``None``: varies).

    TensorFlow's ``output_signature`` is made from this; ``values`` of
    ``output="ragged"`` is a ``tf.RaggedTensor`` (``ragged_rank`` 1, int64
    row splits) of that shape.

    >>> import numpy as np
    >>> sig = batch_signature("padded", np.float32, (3,))
    >>> sig["values"], sig["mask"], sig["repeat"]
    (((None, None, 3), dtype('float32')), ((None, None), dtype('bool')), ((), dtype('bool')))
    >>> sorted(batch_signature("varlen", np.int64))
    ['cu_seqlens', 'indices', 'lengths', 'max_seqlen', 'position_ids', 'repeat', 'values']
    """
    if output not in TF_OUTPUTS:
        raise LodUsageError(f"output {output!r} is not one of {', '.join(TF_OUTPUTS)}")
    dtype, elem = np.dtype(dtype), tuple(int(d) for d in element_shape)
    int64, int32, bool_ = np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.bool_)
    common = {"lengths": ((None,), int64), "indices": ((None,), int64), "repeat": ((), bool_)}
    if output == "padded":
        return {"values": ((None, None, *elem), dtype), "mask": ((None, None), bool_), **common}
    if output == "ragged":
        return {"values": ((None, None, *elem), dtype), **common}
    return {"values": ((None, *elem), dtype), "cu_seqlens": ((None,), int32), "position_ids": ((None,), int64),
            "max_seqlen": ((), int64), **common}


def batch_dataset(path: str | os.PathLike, plan: Any = None, *, output: str = "padded", truncate: str | None = None,
                  pad_value: Any = 0, tensor: str | None = None, **plan_options: Any) -> tf.data.Dataset:
    """A container's training batches as a ``tf.data.Dataset`` (``from_generator``), one element per batch.

    ``plan`` is a :class:`~lodtool.tasks.BatchPlan`, a saved plan's path, or
    ``None`` with the options of :func:`lodtool.batch_plan` (``max_tokens``,
    ``mode``, ``seed``, ``epoch``, ``num_replicas``, ``rank``, ...).  Each
    element is a dict of tensors, as :func:`lodtool.batches` reads them
    (:func:`batch_signature` gives their shapes and dtypes):

    * ``padded``: ``values [B, T, ...]``, ``mask [B, T]`` (bool);
    * ``ragged``: ``values``, a ``tf.RaggedTensor`` ``[B, None, ...]``;
    * ``varlen``: flat ``values``, int32 ``cu_seqlens``, ``position_ids``, ``max_seqlen``,

    plus ``lengths``, ``indices`` (the source sequences) and ``repeat`` (a
    batch repeated to even out the replicas).  Each pass over the dataset
    reads the file again, in the plan's order: for a new order each epoch,
    make the epoch's dataset with ``epoch=e``.  The plan is checked against the
    file here (by reading its first batch), not when TensorFlow first asks for
    a batch.  Every batch is read into fresh
    arrays, so no batch TensorFlow still holds (under ``prefetch``, say) is
    overwritten by the next read.

    >>> import os, tempfile, numpy as np, lodtool
    >>> p = os.path.join(tempfile.mkdtemp(), "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(1, 10), recursive_sequence_lengths=[[3, 1, 4, 1]]))
    >>> ds = batch_dataset(p, max_tokens=8, mode="pack", output="varlen")
    >>> [b["cu_seqlens"].numpy().tolist() for b in ds]
    [[0, 4, 7, 8], [0, 1]]
    >>> b = next(iter(batch_dataset(p, max_sequences=2, mode="sorted", output="ragged")))
    >>> b["values"].to_list()
    [[9], [4]]
    """
    from ..container.shards import open_path
    from ..tasks._batch import BatchReader, as_plan

    tf = _tf()
    batch_signature(output, np.int8)  # refuses an unknown output before any file is read
    path = os.fspath(path)
    if plan is None:
        plan_options["tensor"] = tensor
    plan = as_plan(plan, path, **plan_options)
    with open_path(path) as f:
        stored = f.tensor(tensor if tensor is not None else plan.options.get("tensor"))
        signature = batch_signature(output, stored.dtype, stored.element_shape)
    read_options = {"output": _READ_AS[output], "truncate": truncate, "pad_value": pad_value, "tensor": tensor,
                    "reuse_buffers": False}
    if len(plan):  # a plan made for another file, or a pad value the dtype cannot hold, fails here, not inside TF
        with BatchReader(path, plan, **read_options) as reader:
            reader.read(0)

    specs = {name: tf.TensorSpec(shape, tf.as_dtype(dtype), name=name) for name, (shape, dtype) in signature.items()}
    if output == "ragged":
        shape, dtype = signature["values"]
        specs["values"] = tf.RaggedTensorSpec(shape, tf.as_dtype(dtype), ragged_rank=1, row_splits_dtype=tf.int64)

    def generate() -> Iterator[dict]:  # each pass (each iterator) reads with its own reader
        with BatchReader(path, plan, **read_options) as reader:
            for b in reader:
                if output == "ragged":
                    b["values"] = tf.RaggedTensor.from_row_splits(b["values"], b["offsets"], validate=False)
                yield {name: b[name] for name in signature}

    return tf.data.Dataset.from_generator(generate, output_signature=specs)


__all__ = ["to_ragged_tensor", "from_ragged_tensor", "batch_dataset", "batch_signature", "TF_OUTPUTS"]
