"""Apache Arrow bridge: :func:`to_arrow` / :func:`from_arrow` (the conversions live in :mod:`lodtool.io.arrow`).

A LoD tensor is a nested ``large_list`` array, one row per top-level sequence,
with a ``fixed_size_list`` per element dimension.  Both directions share
memory with the other side where the layouts allow (see each function), and
pyarrow is imported on first use (``pip install 'lodtool[parquet]'``).  The file
formats built on them, Parquet and Arrow IPC / Feather, are
:mod:`lodtool.io.parquet` and :mod:`lodtool.io.arrow`.

>>> import numpy as np, pyarrow as pa
>>> from lodtool import LoDTensor
>>> t = LoDTensor(np.arange(4, dtype=np.int64), [[0, 1, 4]])
>>> a = to_arrow(t)
>>> a.type == pa.large_list(pa.int64()), from_arrow(a).equals(t)
(True, True)
"""

from __future__ import annotations

from ..io.arrow import arrow_field, from_arrow, to_arrow, to_record_batch

__all__ = ["to_arrow", "from_arrow", "to_record_batch", "arrow_field"]
