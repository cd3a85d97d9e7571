"""The verbs of lodtool over files: each ``lodtool <command>`` is one call of one function here.

============================  ==============================================================
:func:`pack`                  ragged JSON / JSON Lines / NPY / NPZ / Parquet / Arrow / Paddle into a container
:func:`unpack`                a stored tensor out as any io format lodtool writes (streamed)
:func:`validate`              check files against the format and the LoD rules
:func:`inspect`               tensors, levels and length statistics (offsets only)
:func:`verify`                recompute every recorded checksum
:func:`slice`                 a branch, or a range of one level, of a stored tensor
:func:`head`, :func:`tail`    the first / last top-level sequences
:func:`tree`                  a stored tensor opened for drawing its branches
:func:`export`                write an in-memory tensor to a container or any io format
:func:`pool`, :func:`softmax`, :func:`reverse`, :func:`expand`, :func:`pad`, :func:`unpad`,
:func:`pack_plan`             the operators over containers, streamed chunk by chunk (pool, softmax,
                              reverse, expand, pad and pack_plan also on Dask, with ``scheduler=``)
:func:`concat`, :func:`seq_slice`, :func:`erase`, :func:`enumerate`, :func:`reshape`,
:func:`lod_reset`             Paddle's sequence_concat, _slice, _erase, _enumerate, _reshape and lod_reset
                              over containers, streamed
:func:`pack_plan_stream`      pack_plan's arrays made piece by piece, for a level of any number of sequences
:func:`batch`                 training batches planned from the offsets (:func:`batch_plan`, :func:`batches`)
:func:`shard`, :func:`merge`  split a container into a sharded folder / join one into a container
:func:`pack_sharded`          pack into a sharded folder (in parallel on Dask with a scheduler)
============================  ==============================================================

The functions are imported on first use, so ``lodtool inspect`` never loads
the writer, the formats or the operators.

>>> import lodtool.tasks as tasks
>>> callable(tasks.pack) and callable(tasks.validate) and callable(tasks.pool)
True
"""

from __future__ import annotations

from .._lazy import lazy_exports

#: public name -> module (inside lodtool.tasks) that defines it
_LAZY = {
    "pack": "_pack", "PackResult": "_pack",
    "unpack": "_unpack", "UnpackResult": "_unpack",
    "validate": "_check", "inspect": "_check", "verify": "_check", "FileVerification": "_check",
    "slice": "_slice", "head": "_slice", "tail": "_slice", "tree": "_slice", "Excerpt": "_slice",
    "TreeView": "_slice",
    "export": "_export",
    "shard": "_shards", "merge": "_shards", "pack_sharded": "_shards",
    **{name: "_operators" for name in ("pool", "softmax", "reverse", "expand", "pad", "unpad", "pack_plan",
                                       "pack_plan_stream", "StreamedPlan", "concat", "seq_slice", "erase", "enumerate", "reshape", "lod_reset",
                                       "OpResult")},
    **{name: "_batch" for name in ("batch", "batch_plan", "batches", "BatchPlan", "BatchReader", "BatchResult",
                                   "write_batches", "plan_report", "streamed_report", "chunk_locality")},
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = sorted(_LAZY)  # noqa: PLE0605 (a list, built from the table above)
