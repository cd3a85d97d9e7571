"""Sharded folders as verbs: ``shard``, ``merge``, ``pack`` into a folder, and the operators on Dask.

A sharded folder (``DIR/lodtool.json`` + ``DIR/part-00000.lod.h5`` ...) is one
logical tensor; the reading verbs take one wherever they take a container
(they open paths with :func:`lodtool.container.shards.open_path`).  Here are
the verbs that write one, and :class:`dask_scheduler`, the scheduler that the
operators' ``--scheduler`` runs them on (see :mod:`lodtool.tasks._operators`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from .._optional import optional_import
from ..errors import LodUsageError

if TYPE_CHECKING:
    from ..io.text import TextOptions
    from ..tokens import TokenInfo


def _refuse_replacing(folder: str | os.PathLike, *, append: bool = False, overwrite: bool = False,
                     force: bool = False, can_append: bool = True) -> None:
    """Refuse to write over the sharded container in ``folder`` unasked, as over a tensor in a file.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> d = tempfile.mkdtemp()
    >>> from lodtool.container.shards import ShardWriter
    >>> with ShardWriter(d) as w:
    ...     w.write(LoDTensor(np.arange(3), [[0, 3]]))
    >>> _refuse_replacing(d, overwrite=True)
    >>> _refuse_replacing(d)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lodtool.errors.LodExistsError: ... already holds a sharded container: pass overwrite=True to replace it, or ...
    """
    from ..container.shards import manifest_path
    from ..errors import LodExistsError

    if append or overwrite or force or not os.path.isfile(manifest_path(folder)):
        return
    more = ", or append=True to add shards after its own" if can_append else ""
    raise LodExistsError(f"{os.fspath(folder)} already holds a sharded container: pass overwrite=True to replace "
                         f"it{more}")


def _summary(folder: str, manifest) -> dict:
    name = manifest.names[0]
    spec = manifest.tensors[name]
    return {"output": folder, "name": name, "shards": len(manifest.shards),
            "sequences": sum(s.tensors[name].sequences for s in manifest.shards),
            "rows": sum(s.tensors[name].rows for s in manifest.shards),
            "lod_level": spec.lod_level, "dtype": str(spec.dtype)}


def shard(path: str | os.PathLike, folder: str | os.PathLike, *, shard_size: int | str = "1GB",
          name: str | None = None, compression: str | None = None, append: bool = False,
          overwrite: bool = False, force: bool = False, max_memory: int | None = None, token_dtype=None,
          eos_token_id: int | None = None) -> dict:
    """Split a container into a sharded folder of about ``shard_size`` bytes per shard (``lodtool shard``).

    A folder holding a sharded container already needs ``append`` (add shards)
    or ``overwrite``/``force`` (replace it).  A token dataset (Megatron, fairseq,
    datatrove, dolma; ``token_dtype`` and ``eos_token_id`` as :func:`lodtool.open`
    takes them) is read as :func:`pack_sharded` reads it: its tokens become
    tensor ``tokens``, with the token metadata pack records.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.lod.h5"), LoDTensor(np.arange(100), [[0, 30, 60, 100]]))
    >>> shard(os.path.join(d, "x.lod.h5"), os.path.join(d, "s"), shard_size=256)["shards"]
    3
    """
    from ..container.shards import shard_file
    from ..io.token_datasets import format_of

    token_format = format_of(path)
    if token_format is not None:
        if name not in (None, "tokens"):
            raise LodUsageError(f"{os.fspath(path)}: a token dataset is sharded by its tokens (tensor 'tokens'), "
                                f"not tensor {name!r}")
        return pack_sharded([path], folder, shard_size=shard_size, append=append, format=token_format,
                            name="tokens", compression=compression, max_memory=max_memory,
                            overwrite=overwrite, force=force, token_dtype=token_dtype, eos_token_id=eos_token_id)
    _refuse_replacing(folder, append=append, overwrite=overwrite, force=force)
    _refuse_tiny_shards(os.fspath(folder), [path], shard_size)
    manifest = shard_file(path, folder, shard_size=shard_size, name=name, compression=compression,
                          append=append, max_memory=max_memory)
    return _summary(os.fspath(folder), manifest)


def merge(folder: str | os.PathLike, output: str | os.PathLike, *, compression: str | None = None,
          max_memory: int | None = None, overwrite: bool = False, force: bool = False) -> dict:
    """Join a sharded folder into one container, level names kept (``lodtool merge``); a container file is copied
    (a repack: ``lodtool merge a.lod.h5 -o b.lod.h5 --layout paged`` lays it out for object storage).

    Into an existing container the tensors are added; one of the same name
    needs ``overwrite``, and ``force`` replaces the whole file.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> t = LoDTensor(np.arange(100), [[0, 30, 60, 100]], level_names=["doc"])
    >>> save(os.path.join(d, "x.lod.h5"), t)
    >>> _ = shard(os.path.join(d, "x.lod.h5"), os.path.join(d, "s"), shard_size=256)
    >>> merge(os.path.join(d, "s"), os.path.join(d, "m.lod.h5"))["sequences"]
    3
    >>> load(os.path.join(d, "m.lod.h5")).equals(t)
    True
    """
    from ..container.shards import merge as merge_folder
    from ..container.shards import open_path

    with open_path(folder) as f:  # a sharded folder, or a container file copied into the output's layout (a repack)
        name = f.names[0]
    merge_folder(folder, output, compression=compression, max_memory=max_memory, overwrite=overwrite, force=force)
    with open_path(output) as f:
        t = f[name]
        return {"output": os.fspath(output), "name": name, "sequences": len(t), "rows": t.n_rows,
                "lod_level": t.lod_level, "dtype": str(t.dtype)}


def pack_sharded(inputs: Sequence[str | os.PathLike], folder: str | os.PathLike, *,
                 shard_size: int | str = "1GB", append: bool = False, scheduler: str | None = None,
                 workers: int | None = None, progress: Callable[[int, int], None] | None = None,
                 format: str | None = None, lod_level: int | None = None, dtype=None, name: str = "tensor",
                 level_names: Sequence[str] | None = None, compression: str | None = None,
                 column: str | None = None, max_memory: int | None = None, overwrite: bool = False,
                 force: bool = False, token_dtype=None, eos_token_id: int | None = None,
                 tokens: "TokenInfo | None" = None, text: "TextOptions | None" = None) -> dict:
    """Pack inputs into a sharded folder (``lodtool pack ... -o DIR/``).

    Without ``scheduler`` the inputs stream, in order, into shards of about
    ``shard_size`` bytes.  With one (``"processes"``, ``"threads"`` or a
    scheduler address) each input file is packed by a Dask worker into a shard
    of its own, then the manifest is written; ``progress(done, total)`` counts
    the shards.  ``append`` adds shards after the folder's existing ones.
    ``column``, ``max_memory``, ``token_dtype``, ``eos_token_id``, ``tokens`` and ``text``
    are :func:`lodtool.tasks.pack`'s: every shard and the manifest record the token
    metadata pack records in one file.  A folder holding a sharded container already
    needs ``append`` or ``overwrite``/``force``.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "a.jsonl"), "w").write("[1, 2]\\n[3]\\n" * 50)
    >>> pack_sharded([os.path.join(d, "a.jsonl")], os.path.join(d, "out"), shard_size=256)["shards"]
    9
    """
    from ..container.shards import ShardWriter, read_manifest
    from ..container.writer import AUTO_INT

    if isinstance(dtype, str) and dtype == AUTO_INT:  # it narrows per container: shards could disagree
        raise LodUsageError("dtype='auto-int' picks the narrowest dtype per container, and a sharded folder needs "
                            "one dtype for every shard; give the dtype (say int32), or pack into one file and "
                            "split it with lodtool shard")
    folder = os.fspath(folder)
    _refuse_replacing(folder, append=append, overwrite=overwrite, force=force)
    stored = _stored_spec(folder, name) if append else None
    if stored is not None:  # appending takes the folder's level names and dtype, as appending to a file does
        level_names = level_names if level_names is not None or not stored.level_names else list(stored.level_names)
        dtype = dtype if dtype is not None else stored.dtype
    if scheduler and text is not None and text.words and text.vocabulary is None:
        raise LodUsageError("a word vocabulary counted on each Dask worker would give each shard its own ids: give "
                            "vocab=FILE, or leave out scheduler=")
    if scheduler:
        if text is not None:  # the workers may run in another folder
            text = dataclasses.replace(text, **{k: os.path.abspath(v) for k in ("tokenizer", "vocabulary")
                                               if isinstance(v := getattr(text, k), (str, os.PathLike))})
        from ..interop.dask import pack as dask_pack

        options = {"format": format, "lod_level": lod_level, "dtype": dtype, "name": name,
                   "level_names": None if level_names is None else list(level_names), "compression": compression}
        given = {"column": column, "max_memory": max_memory, "token_dtype": token_dtype,
                 "eos_token_id": eos_token_id, "tokens": tokens, "text": text}
        options.update({k: v for k, v in given.items() if v is not None})
        with _no_stray_shards(folder), dask_scheduler(scheduler, workers) as compute_kwargs:
            manifest = dask_pack(list(inputs), folder, append=append, progress=progress,
                                 compute_kwargs=compute_kwargs, **options)
        return _summary(folder, manifest)
    from ._pack import PackSource, _data_chunk_bytes

    source = PackSource.open(inputs, format=format, lod_level=lod_level, dtype=dtype, level_names=level_names,
                             column=column, max_memory=max_memory, token_dtype=token_dtype,
                             eos_token_id=eos_token_id, tokens=tokens, text=text)
    _refuse_tiny_shards(folder, source.sources, shard_size)
    with ShardWriter(folder, shard_size=shard_size, append=append, compression=compression, name=name,
                     tokens=source.tokens, chunk_bytes=_data_chunk_bytes(source.format, compression)) as w:
        for chunk in source.chunks:
            w.write(chunk if source.level_names is None else chunk.with_level_names(source.names_for(chunk)))
    return _summary(folder, read_manifest(folder))


#: the smallest shard size a streamed pack takes where it would make more than :data:`MANY_SHARDS` shards: each
#: shard is a file, and tens of thousands of tiny ones (a size typed as 1KB for 1GB) help no reader
MIN_SHARD_SIZE = 1 << 20
MANY_SHARDS = 1_000


def _refuse_tiny_shards(folder: str, sources: Sequence, shard_size: int | str) -> None:
    """Refuse a shard size below :data:`MIN_SHARD_SIZE` that would cut the inputs (those of known size) into
    more than :data:`MANY_SHARDS` files.

    >>> _refuse_tiny_shards("out/", [__file__], 4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lodtool.errors.LodUsageError: out/: a shard size of 4 B would cut ... shards, a file each; ...
    """
    from .. import io as formats
    from ..io.token_datasets import input_bytes
    from ..limits import human_bytes, parse_size

    size = parse_size(shard_size, "shard size")
    total = sum(input_bytes(s) or 0 for s in sources if isinstance(s, (str, os.PathLike)) and not formats.is_stdin(s))
    floor = min(MIN_SHARD_SIZE, -(-total // MANY_SHARDS))
    if size < floor:
        raise LodUsageError(f"{folder}: a shard size of {human_bytes(size)} would cut {human_bytes(total)} of input "
                            f"into about {total // size:,} shards, a file each; give a shard size of at least "
                            f"{human_bytes(floor)} (256MB to 1GB suit most corpora)")


def _stored_spec(folder: str, name: str):
    """The manifest's spec of tensor ``name`` in the sharded ``folder`` (None: no such folder or tensor)."""
    from ..container.shards import manifest_path, read_manifest

    if not os.path.isfile(manifest_path(folder)):
        return None
    return read_manifest(folder).tensors.get(name)


# -- operators on Dask ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _no_stray_shards(folder: str | os.PathLike | None) -> Iterator[None]:
    """Wrap a Dask job and its scheduler: when the job fails, remove the shard files that appeared in ``folder``
    during it and that no manifest names, and the folder when the job made it and it is left empty.

    The job's own cleanup runs as soon as the failure reaches the client, while tasks that were already running
    may still finish and write their shard; once the scheduler block has ended (a local pool joined, a local
    cluster closed), nothing of the job runs any more, so this sweep leaves no stray shard.
    """
    if folder is None:
        yield
        return
    from ..container.shards import _shard_index, remove_uncommitted_shards

    folder = os.path.abspath(os.fspath(folder))
    created = not os.path.exists(folder)
    before = set() if created or not os.path.isdir(folder) else set(os.listdir(folder))
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):  # the folder went away: nothing to sweep
            new = [os.path.join(folder, n) for n in set(os.listdir(folder)) - before if _shard_index(n) is not None]
            remove_uncommitted_shards(folder, new, created=created)
        raise


class dask_scheduler:
    """``--scheduler processes|threads|ADDRESS`` (with ``--workers N``) as the keyword arguments of
    ``dask.compute``, with a local cluster or a client held open for the block.

    ``processes`` starts a ``distributed.LocalCluster`` of ``N`` single-thread
    process workers (h5py serializes calls within a process); ``threads`` runs
    Dask's local scheduler on a thread pool of its own, joined on leaving the
    block (so no task of a failed job still runs after it); anything else is a
    scheduler address to connect to, within ``timeout`` seconds (see
    :func:`lodtool.interop.dask.connect`).  Without Dask installed it refuses
    at once, naming the extra to install.
    """

    def __init__(self, scheduler: str, workers: int | None = None, timeout: float | None = None):
        if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
            raise LodUsageError(f"workers=... must be a positive integer, got {workers!r}")
        optional_import("dask", "dask", "a Dask scheduler")
        self.scheduler, self.workers, self.timeout = scheduler, workers, timeout
        self._client = self._cluster = self._pool = None

    def __enter__(self) -> dict:
        if self.scheduler == "threads":
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(int(self.workers or os.cpu_count() or 1),
                                            thread_name_prefix="lodtool-dask")
            return {"scheduler": "threads", "pool": self._pool}
        if self.scheduler == "sync":
            return {"scheduler": "sync"}
        distributed = optional_import("distributed", "dask", "a Dask scheduler at an address")
        if self.scheduler == "processes":
            import logging

            n = int(self.workers or os.cpu_count() or 1)
            self._cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                         dashboard_address=":0", silence_logs=logging.ERROR)
            self._client = distributed.Client(self._cluster)
        else:
            from ..interop.dask import connect

            self._client = connect(self.scheduler, self.timeout)
        return {}

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
