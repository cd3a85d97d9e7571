"""A tensor's data copied out of its file as it is stored: no decoding, checked by the dataset's digest.

Uncompressed data (no filter, or only ``fletcher32``: what ``--compression
none`` writes) is the rows' own bytes, so a format that stores the tokens
raw (Megatron's ``.bin``) is written by the kernel from the file's chunks
(``copy_file_range``, as ``cp`` copies; vectored writes from the file's map
where the kernel cannot), with its write-back started as it goes.  Instead of
each chunk's Fletcher-32 the bytes are hashed from the map, each chunk just
before the kernel copies it (so the copy finds it in the cache; xxh3 hashes
many times faster than the kernel copies), and compared with the dataset's
recorded ``xxh3_64`` digest, which covers every byte (the caller discards its
output on a mismatch).
"""

from __future__ import annotations

import errno
import os
from typing import BinaryIO, Callable

import numpy as np

from ..errors import LodChecksumError
from . import checksum, spec
from ._mmap import mapping
from ._writeback import WRITEBACK_BYTES, start_writeback_fd

#: runs (stored chunks) copied between two write-back starts and progress calls
GROUP_RUNS = 512


#: what ``copy_file_range`` answers where it cannot copy between these files (then they are written from the map)
_NOT_IN_KERNEL = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}


def stored_copier(tensor) -> Callable[[BinaryIO, Callable[[int], None] | None], int] | None:
    """``copy(out, progress)``, which writes every row of ``tensor`` (a container's
    :class:`~lodtool.container.reader.LazyTensor`) to the binary file ``out`` from the bytes the file stores and
    returns how many it wrote; or None where the data is not stored plainly (compressed, not mapped, no recorded
    digest, a big-endian machine), nothing read.  ``progress(n)`` is called with the bytes written so far.

    The copy raises :class:`~lodtool.errors.LodChecksumError` when the bytes do not match the recorded digest.

    >>> import io, os, tempfile
    >>> from lodtool import LoDTensor, save
    >>> from lodtool.container import open_file
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(5, dtype=np.int32), [[0, 2, 5]]), compression="none")
    >>> with open_file(p) as f, open(os.path.join(os.path.dirname(p), "t.bin"), "w+b") as out:
    ...     stored_copier(f.tensor())(out, None), out.seek(0), np.frombuffer(out.read(), np.int32).tolist()
    (20, 0, [0, 1, 2, 3, 4])
    """
    if not np.little_endian or not tensor.n_rows:
        return None
    mapped = mapping(tensor._data)
    recorded = tensor._data.attrs.get(spec.ATTR_DIGEST)
    if mapped is None or recorded is None:
        return None
    label = f"{tensor._path}: tensor {tensor.name!r} data"
    expected = checksum.parse_digest(spec.text_attr(recorded), label)

    def copy(out: BinaryIO, progress: Callable[[int], None] | None = None) -> int:
        out.flush()
        fd, src = out.fileno(), mapped.fileno()
        hasher = checksum.new_hasher()
        runs = mapped.stored_runs()
        written = unqueued = 0
        in_kernel = True
        for first in range(0, len(runs), GROUP_RUNS):
            group = runs[first:first + GROUP_RUNS]
            for run in group:  # hashed just before it is copied: the copy reads it from the cache
                hasher.update(run[1])
                if in_kernel:
                    in_kernel = _copy_in_kernel(src, fd, [run])
                if not in_kernel:
                    _write_all(fd, [run[1]])
            n = sum(view.nbytes for _, view in group)
            written += n
            unqueued += n
            if unqueued >= WRITEBACK_BYTES:
                start_writeback_fd(fd)
                unqueued = 0
            if progress is not None:
                progress(written)
        if checksum.format_digest(hasher) != expected:
            raise LodChecksumError(f"{label} does not match its recorded checksum (run lodtool verify)")
        return written

    return copy


def _copy_in_kernel(src: int, dst: int, runs: list[tuple[int, np.ndarray]]) -> bool:
    """Append the file ranges of ``runs`` to ``dst`` with ``copy_file_range`` (no pass through this process's
    memory: what ``cp`` does); False, nothing written, where the kernel or the file systems cannot."""
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is None:
        return False
    for i, (offset, view) in enumerate(runs):
        done, size = 0, view.nbytes
        while done < size:
            try:
                n = copy_range(src, dst, size - done, offset + done)
            except OSError as exc:
                if i == 0 and not done and exc.errno in _NOT_IN_KERNEL:
                    return False
                raise
            if n <= 0:
                raise OSError(f"copied nothing of {size - done:,} bytes")
            done += n
    return True


def _write_all(fd: int, views: list[np.ndarray]) -> int:
    """Write ``views`` one after another with vectored writes, whatever part of them each call takes."""
    total = 0
    while views:
        n = os.writev(fd, views)
        if n <= 0:
            raise OSError(f"wrote nothing of {sum(v.nbytes for v in views):,} bytes")
        total += n
        rest = []
        for v in views:  # what a short write (a signal, a nearly full disk) left, from where it stopped
            if n >= v.nbytes:
                n -= v.nbytes
            else:
                rest.append(v[n:])
                n = 0
        views = rest
    return total


__all__ = ["stored_copier", "GROUP_RUNS"]
