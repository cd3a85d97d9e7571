"""HuggingFace ``datasets`` bridge: a LoD tensor as a dataset column of nested ``LargeList`` features.

:func:`write_hf_file` writes an Arrow IPC *stream* file, the format of
``datasets``' own cache files, with the ``huggingface`` features in the schema
metadata, so ``datasets.Dataset.from_file(path)`` opens it memory-mapped (no
copy, no conversion).  The column is named ``name``; its feature is
``LargeList`` per LoD level over ``Value(dtype)`` (``List(..., length=D)`` per
element dimension), and the level names travel in the field's metadata
(``lodtool.level_names``; ``datasets`` drops that when it loads a table, so
:func:`from_hf` reads them from the file when given its path).  :func:`to_hf` gives an in-memory ``Dataset`` over
the tensor's own buffers; :func:`from_hf` reads a column of a ``Dataset`` (or
of such a file) back.  ``datasets`` and pyarrow are imported on first use
(``pip install 'lodtool[datasets]'``).

>>> import os, tempfile, numpy as np, datasets
>>> from lodtool import LoDTensor
>>> t = LoDTensor(np.arange(5, dtype=np.int32), [[0, 2, 3], [0, 1, 3, 5]], level_names=["doc", "sentence"])
>>> path = write_hf_file(t, os.path.join(tempfile.mkdtemp(), "ids.arrow"), name="ids")
>>> ds = datasets.Dataset.from_file(path)
>>> ds.features["ids"], ds[1]["ids"]
(LargeList(LargeList(Value('int32'))), [[3, 4]])
>>> from_hf(ds).equals(t)
True
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Iterable

from .._device import _one_line
from .._optional import optional_import
from ..errors import LodInputError
from ..io.arrow import (_level_names, _named, _pa, arrow_field, from_arrow, pick_column, sink_for, to_record_batch,
                        write_batches)
from ..tensor import LoDTensor

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa


def _datasets():
    return optional_import("datasets", "datasets", "the HuggingFace bridge")


def hf_schema(t: LoDTensor, name: str = "tensor") -> pa.Schema:
    """The Arrow schema of tensor ``t`` as column ``name``, with ``datasets``' features in its metadata.

    >>> import json, numpy as np
    >>> schema = hf_schema(LoDTensor(np.arange(2, dtype=np.int32), [[0, 2]]), "ids")
    >>> json.loads(schema.metadata[b"huggingface"])["info"]["features"]["ids"]["_type"]
    'LargeList'
    """
    return _with_features(_pa().schema([arrow_field(name, t)]))


def _with_features(schema: pa.Schema) -> pa.Schema:
    return schema.with_metadata(_datasets().Features.from_arrow_schema(schema).arrow_schema.metadata)


def write_hf_file(tensor_or_chunks: LoDTensor | Iterable[LoDTensor], path: str | os.PathLike, *,
                  name: str = "tensor") -> str:
    """Write a tensor (or chunks of one) as a ``datasets`` Arrow file; returns the path.

    One record batch per chunk; a path is written atomically.  Open it with
    ``datasets.Dataset.from_file(path)`` (memory-mapped).

    >>> import os, tempfile, numpy as np, datasets
    >>> p = write_hf_file(LoDTensor(np.arange(3.0), [[0, 1, 3]]), os.path.join(tempfile.mkdtemp(), "x.arrow"))
    >>> datasets.Dataset.from_file(p)["tensor"][:]
    [[0.0], [1.0, 2.0]]
    """
    pa = _pa()

    from ..atomic import atomic_open

    chunks = [tensor_or_chunks] if isinstance(tensor_or_chunks, LoDTensor) else tensor_or_chunks
    with atomic_open(path) as out:
        write_batches(chunks, name, None, lambda schema: pa.ipc.new_stream(sink_for(out), _with_features(schema)),
                      lambda writer, batch: writer.write_batch(batch), required=False)
    return os.fspath(path)


def to_hf(t: LoDTensor, name: str = "tensor") -> datasets.Dataset:
    """An in-memory ``datasets.Dataset`` with one column ``name`` over ``t``'s own buffers (zero-copy).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> ds = to_hf(LoDTensor(np.arange(3.0), [[0, 1, 3]]), "x")
    >>> ds.num_rows, ds[1]["x"]
    (2, [1.0, 2.0])
    """
    pa = _pa()

    datasets = _datasets()
    table = pa.Table.from_batches([to_record_batch(t, name)]).replace_schema_metadata(hf_schema(t, name).metadata)
    return datasets.Dataset(datasets.table.InMemoryTable(table))


def from_hf(dataset: Any, column: str | None = None, *, level_names=None, validate: bool = True) -> LoDTensor:
    """The LoD tensor in ``column`` of a ``datasets.Dataset``, of an Arrow file, or of a ``save_to_disk`` folder.

    A path is a file that ``Dataset.from_file`` opens (as :func:`write_hf_file`
    writes) or a folder that ``Dataset.save_to_disk`` wrote (opened with
    ``datasets.load_from_disk``; a ``DatasetDict``'s folder is refused, naming
    its splits' folders).  ``column=None`` takes the only column.  A dataset
    whose table is one record batch comes back zero-copy (views of the memory
    map); more batches are concatenated (one copy); a dataset with an indices
    mapping (after ``shuffle``, ``select``, ...) is gathered first (one copy).
    ``datasets`` drops Arrow field metadata when it loads or saves a table, so
    the level names come back from a *file* path (read from the file's schema)
    or from ``level_names``.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> from_hf(to_hf(LoDTensor(np.arange(3), [[0, 2, 3]]), "ids"), "ids").lod
    [[0, 2, 3]]
    """
    datasets = _datasets()
    if isinstance(dataset, (str, os.PathLike)):
        path = os.fspath(dataset)
        if not os.path.exists(path):
            from ..errors import LodFileNotFoundError

            raise LodFileNotFoundError(f"{path}: no such file")
        folder = os.path.isdir(path)
        if folder:
            _check_saved_folder(path)
        try:
            dataset = datasets.load_from_disk(path) if folder else datasets.Dataset.from_file(path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise LodInputError(f"{path}: datasets cannot open it ({_one_line(exc)})") from None
        if level_names is None and not folder:
            level_names = _file_level_names(path, column)
    if not isinstance(dataset, datasets.Dataset):
        raise LodInputError(f"from_hf takes a datasets.Dataset (pick a split of a DatasetDict), got "
                            f"{type(dataset).__name__}")
    column = dataset.column_names[pick_column(dataset.data.schema, column, "the dataset")]
    table = dataset.with_format("arrow")[:]
    t = from_arrow(table.column(column), validate=validate)
    if level_names is None:
        level_names = _level_names(table.schema.field(column))
    return _named(t, level_names)


def _check_saved_folder(path: str) -> None:
    """Refuse a folder that is not one ``Dataset.save_to_disk`` wrote (a ``DatasetDict``'s names its splits)."""
    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        try:
            with open(os.path.join(path, "dataset_dict.json"), encoding="utf-8") as f:
                splits = [str(s) for s in json.load(f)["splits"]]
        except (OSError, ValueError, KeyError, TypeError):
            splits = sorted(e.name for e in os.scandir(path) if e.is_dir())
        example = os.path.join(path, splits[0]) if splits else os.path.join(path, "SPLIT")
        raise LodInputError(f"{path}: a DatasetDict saved with save_to_disk (splits: {', '.join(splits)}); "
                            f"pass one split's folder, e.g. {example}")
    # the two files datasets.load_from_disk looks for
    if not all(os.path.isfile(os.path.join(path, name)) for name in ("state.json", "dataset_info.json")):
        raise LodInputError(f"{path}: a folder, but not one that Dataset.save_to_disk wrote (no state.json and "
                            "dataset_info.json); pass that folder or an Arrow file (Dataset.from_file opens it)")


def _file_level_names(path: str, column: str | None):
    """The level names in the field metadata of a file :func:`write_hf_file` wrote (None if absent)."""
    pa = _pa()

    try:
        with pa.memory_map(path) as source:
            schema = pa.ipc.open_stream(source).schema
    except (pa.ArrowInvalid, OSError):
        return None
    names = schema.names
    if column is None and len(names) == 1:
        column = names[0]
    return _level_names(schema.field(column)) if column in names else None


__all__ = ["write_hf_file", "to_hf", "from_hf", "hf_schema"]
