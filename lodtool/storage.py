"""Containers in object storage (``s3://``, ``gs://``, ``az://``, ``https://``, ``memory://`` ...), through fsspec.

A source or an output written as a URL with a scheme is opened through
`fsspec <https://filesystem-spec.readthedocs.io>`_ (the ``remote`` extra); a
plain path, or a ``file://`` URL, stays a local file (memory-mapped where it
can be).  Everything the readers and writers need from a URL is here:

* :func:`open_input`: a read-only, seekable file object for libhdf5's
  file-object driver.  It reads the first :data:`HEAD_BYTES` of the object in
  one request (a container laid out for remote reading keeps all its metadata
  in its first page, see ``docs/remote.md``), then each read libhdf5 asks for
  as one range request of exactly its bytes, and keeps what it read
  (:data:`KEPT_BYTES`), so no metadata is asked for twice.  A paged file's
  small datasets (its offsets) are read ahead together (:data:`READ_AHEAD_BYTES`):
  a branch read then costs the request for its data chunk.
* :func:`read_bytes`, :func:`info`, :func:`join`: a sharded folder's manifest
  and its shards.
* :func:`lodtool.atomic.publish` puts a finished local file under a URL whole
  or not at all (one PUT, or a multipart upload completed only at the end).
* Credentials come from where fsspec and its back ends find them (the
  environment, config files), from ``storage_options=`` in the library and
  ``--storage-option k=v`` on the command line (:func:`options`).  They are
  never stored or printed: every message names a URL through :func:`redact`,
  and any text of a back-end error through :func:`scrub`.
* Every failure is a typed error naming the URL without its credentials: a
  missing object or bucket :class:`~lodtool.errors.LodFileNotFoundError`, no
  credentials or access denied :class:`~lodtool.errors.LodAccessError`, a
  server that does not answer within the timeout
  :class:`~lodtool.errors.LodTimeoutError`, anything else
  :class:`~lodtool.errors.LodStorageError`.

>>> is_url("s3://bucket/x.lod.h5"), is_url("x.lod.h5"), is_url("file:///tmp/x.lod.h5")
(True, False, False)
>>> redact("https://user:secret@example.com/x.lod.h5?X-Amz-Signature=abc")
'https://example.com/x.lod.h5'
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import io
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from .errors import (LodAccessError, LodError, LodFileNotFoundError, LodStorageError, LodTimeoutError,
                     LodUsageError)

#: a URL lodtool hands to fsspec: a scheme of two letters or more (``C:\\`` stays a path), then ``://``
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")
#: ``scheme://user:password@host`` and ``?query`` (pre-signed URLs carry their signature there)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+://)[^/@\s]*@")
_QUERY = re.compile(r"(?P<url>[A-Za-z][A-Za-z0-9+.\-]+://[^\s?#'\"]*)[?#][^\s'\"]*")
#: storage option names whose values are secrets, scrubbed from any text lodtool shows
_SECRET_KEY = re.compile(r"key|secret|token|password|passwd|credential|signature|sas|auth", re.IGNORECASE)

#: the first bytes of an object read in one request on open: a container laid out for remote reading
#: (:data:`PAGE_SIZE` pages) holds its superblock, groups, dataset headers and chunk indexes there
PAGE_SIZE = 1 << 20
HEAD_BYTES = PAGE_SIZE
#: bytes of reads outside the head kept per object (libhdf5 re-reads evicted metadata; chunk reads repeat)
KEPT_BYTES = 32 << 20
#: a read above this is passed through and not kept (a stream over a whole tensor must not fill memory)
KEPT_READ_BYTES = 1 << 20
#: bytes of a paged file's smallest datasets (a container's offsets, which every branch read looks up) read in
#: as few requests as their places in the file allow, the first time a read comes near them, and kept: at most
#: this, and at most a :data:`READ_AHEAD_SHARE`-th of the object (a container's data, many times the size of its
#: offsets, stays out: a branch read fetches the chunks it needs, and nothing around them)
READ_AHEAD_BYTES = 4 << 20
READ_AHEAD_SHARE = 16
#: datasets a plan looks at, at most (in the order the file lists them: opening stays quick in a file of many)
PLANNED_DATASETS = 1024
#: spans of the file at most this far apart are fetched in one request (the bytes between them come along)
MERGE_GAP = 4 << 10
#: objects whose head and kept reads the process keeps, shared by every handle on the same version of an object
#: (a batch plan and its reader, the shards a Dask task reopens): least recently opened first out
KEPT_OBJECTS = 16
#: seconds to connect, and to wait for an answer, before a request fails (``timeout=`` overrides both)
DEFAULT_TIMEOUT = 20.0
#: tries of one request after a transient failure (a reset connection); a timeout is not tried again
DEFAULT_ATTEMPTS = 2
#: object stores whose PUT (and completed multipart upload) makes an object appear whole or not at all
WHOLE_OBJECT_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory", "oss", "r2"})


def is_url(path: Any) -> bool:
    """Whether ``path`` names something fsspec opens (a URL with a scheme other than ``file``)."""
    if not isinstance(path, str):
        return False
    found = _URL.match(path)
    return found is not None and found.group(1).lower() != "file"


def local_path(path: Any) -> Any:
    """``file:///x/y`` -> ``/x/y`` (a local file keeps every local path's features); anything else unchanged.

    >>> local_path("file:///tmp/a.lod.h5"), local_path("s3://b/a.lod.h5")
    ('/tmp/a.lod.h5', 's3://b/a.lod.h5')
    """
    if isinstance(path, str) and path[:7].lower() == "file://":
        return path[7:]
    return path


def absolute(path: Any) -> str:
    """``path`` as another process in another folder reads it (a Dask worker): a URL as it is, a local path
    absolute.

    >>> absolute("s3://b/x.lod.h5"), absolute("/data/x.lod.h5"), absolute("file:///data/x.lod.h5")
    ('s3://b/x.lod.h5', '/data/x.lod.h5', '/data/x.lod.h5')
    """
    import os

    path = local_path(os.fspath(path))
    return path if is_url(path) else os.path.abspath(path)


def protocol(url: str) -> str:
    """The URL's scheme, lower case (``s3``)."""
    found = _URL.match(url)
    return found.group(1).lower() if found else "file"


def redact(text: str) -> str:
    """``text`` with every URL's ``user:password@`` and ``?query`` removed (what any message shows of a URL).

    >>> redact("s3://AKIA:SECRET@bucket/a.lod.h5: no such object")
    's3://bucket/a.lod.h5: no such object'
    """
    return _QUERY.sub(r"\g<url>", _USERINFO.sub(r"\g<scheme>", text))


def _secret_values(storage_options: Mapping[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(mapping: Mapping[str, Any], secret: bool) -> None:
        for key, value in mapping.items():
            is_secret = secret or bool(_SECRET_KEY.search(str(key)))
            if isinstance(value, Mapping):
                walk(value, is_secret)
            elif is_secret and isinstance(value, str) and len(value) >= 3:
                found.append(value)

    walk(storage_options, False)
    return sorted(found, key=len, reverse=True)


def _url_secrets(url: str | None) -> list[str]:
    """What a URL carries that is secret: its ``user:password`` and its query (a back end may quote them bare)."""
    if not url:
        return []
    found = []
    userinfo = _USERINFO.match(url)
    if userinfo:
        info = url[len(userinfo.group("scheme")):userinfo.end() - 1]
        found += [info, *(part for part in info.split(":") if len(part) >= 3)]
    query = url.partition("?")[2].partition("#")[0]
    if query:
        found += [query, *(v for pair in query.split("&") for v in [pair.partition("=")[2]] if len(v) >= 3)]
    return found


def scrub(text: str, storage_options: Mapping[str, Any] | None = None, url: str | None = None) -> str:
    """:func:`redact`, and every secret value of ``storage_options`` (keys, tokens, passwords) and of ``url`` (its
    ``user:password``, its query) replaced by ``***``, wherever the text has it.

    >>> scrub("bad key AKIA123 for s3://u:p@b/x", {"key": "AKIA123", "endpoint_url": "http://h"})
    'bad key *** for s3://b/x'
    >>> scrub('bad bucket "AKIA9:pass9@b"', {}, url="s3://AKIA9:pass9@b/x")
    'bad bucket "***@b"'
    """
    text = redact(" ".join(str(text).split()))
    secrets = _secret_values(storage_options or current_options()) + _url_secrets(url)
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, "***")
    return text


# -- storage options --------------------------------------------------------------------------------------------
_OPTIONS: contextvars.ContextVar[dict] = contextvars.ContextVar("lodtool_storage_options", default={})


def current_options() -> dict:
    """The storage options in force (set by :func:`options`; empty: fsspec's own defaults)."""
    return _OPTIONS.get()


@contextlib.contextmanager
def options(storage_options: Mapping[str, Any] | None = None, **more: Any) -> Iterator[dict]:
    """Storage options for every URL opened inside the block (credentials, ``endpoint_url``, ``timeout``, ...).

    What fsspec's file system for the URL's scheme takes (``key``, ``secret``,
    ``anon``, ``endpoint_url`` for ``s3://``; ``token`` for ``gs://`` ...),
    plus lodtool's ``timeout`` (seconds) and ``attempts``.  Nothing is stored
    beyond the block, and a handle opened inside it keeps what it needs.

    >>> with options({"anon": True}, timeout=5):
    ...     current_options()
    {'anon': True, 'timeout': 5}
    >>> current_options()
    {}
    """
    merged = {**_OPTIONS.get(), **dict(storage_options or {}), **more}
    token = _OPTIONS.set(merged)
    try:
        yield merged
    finally:
        _OPTIONS.reset(token)


def parse_option(text: str) -> tuple[str, Any]:
    """``k=v`` of ``--storage-option``: ``v`` as JSON where it parses (``true``, ``3``, ``{"a": 1}``), else text.

    >>> parse_option("anon=true"), parse_option("endpoint_url=http://127.0.0.1:9000"), parse_option("timeout=2.5")
    (('anon', True), ('endpoint_url', 'http://127.0.0.1:9000'), ('timeout', 2.5))
    """
    import json

    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise LodUsageError(f"bad storage option {redact(text.split('=')[0])!r}: write it as KEY=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _fsspec():
    from ._optional import optional_import

    return optional_import("fsspec", "remote", "reading and writing URLs")


def _client_options(scheme: str, storage_options: Mapping[str, Any]) -> dict:
    """fsspec's keyword arguments for ``scheme``: the user's, with lodtool's bounded timeouts and retries."""
    opts = dict(storage_options)
    timeout = float(opts.pop("timeout", DEFAULT_TIMEOUT))
    attempts = int(opts.pop("attempts", DEFAULT_ATTEMPTS))
    if scheme in ("s3", "s3a"):
        config = dict(opts.get("config_kwargs") or {})
        config.setdefault("connect_timeout", timeout)
        config.setdefault("read_timeout", timeout)
        config.setdefault("retries", {"max_attempts": attempts, "mode": "standard"})
        opts["config_kwargs"] = config
    elif scheme in ("http", "https"):
        client = dict(opts.get("client_kwargs") or {})
        if "timeout" not in client:
            from ._optional import optional_import

            aiohttp = optional_import("aiohttp", "remote", "reading https:// URLs")  # fsspec's HTTP is built on it
            client["timeout"] = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        opts["client_kwargs"] = client
    return opts


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec file system for ``url`` and the path inside it."""
    given = current_options() if storage_options is None else storage_options
    scheme = protocol(url)
    try:
        fs, path = _fsspec().core.url_to_fs(url, **_client_options(scheme, given))
    except LodError:
        raise
    except ImportError as exc:  # fsspec knows the scheme, but its back end is not installed
        raise LodStorageError(f"{redact(url)}: cannot open {scheme}:// URLs ({scrub(str(exc), given, url)})") from None
    except ValueError as exc:  # an unknown scheme
        raise LodUsageError(f"{redact(url)}: {scrub(str(exc), given, url)}") from None
    except TypeError as exc:  # a storage option the file system does not take
        raise LodUsageError(f"{redact(url)}: a storage option that {scheme}:// does not take "
                            f"({scrub(str(exc), given, url)})") from None
    if scheme in ("s3", "s3a"):
        fs.retries = 1  # s3fs's own loop around botocore's retries (which already follow `attempts`)
    return fs, path


# -- errors -----------------------------------------------------------------------------------------------------
def _types(module: str, *names: str) -> tuple[type, ...]:
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return ()
    return tuple(getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type))


def _timeout_types() -> tuple[type, ...]:
    import asyncio

    return (TimeoutError, asyncio.TimeoutError, *_types("fsspec.exceptions", "FSTimeoutError"),
            *_types("botocore.exceptions", "ConnectTimeoutError", "ReadTimeoutError"),
            *_types("aiohttp", "ServerTimeoutError"))


def _access_types() -> tuple[type, ...]:
    return (PermissionError, *_types("botocore.exceptions", "NoCredentialsError", "PartialCredentialsError",
                                     "CredentialRetrievalError", "NoAuthTokenError"))


def storage_error(exc: BaseException, url: str, what: str,
                  storage_options: Mapping[str, Any] | None = None) -> LodError:
    """The typed lodtool error for a failure of fsspec or its back end: ``"URL: WHAT (reason)"``, credentials out."""
    if isinstance(exc, LodError):
        return exc
    reason = scrub(str(exc), storage_options, url) or type(exc).__name__
    where = f"{redact(url)}: {what}"
    if isinstance(exc, _timeout_types()):
        return LodTimeoutError(f"{where}: the server did not answer in time ({reason})")
    if isinstance(exc, FileNotFoundError):
        return LodFileNotFoundError(f"{where}: no such object or bucket")
    if isinstance(exc, _access_types()):
        return LodAccessError(f"{where}: access denied, or no credentials ({reason}); give them in the environment "
                              "or a config file, or pass storage_options=...")
    return LodStorageError(f"{where} ({reason})")


@contextlib.contextmanager
def translate(url: str, what: str, storage_options: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Re-raise any failure of the block as :func:`storage_error` (a one-line typed error naming ``url``)."""
    try:
        yield
    except LodError:
        raise
    except Exception as exc:
        raise storage_error(exc, url, what, storage_options) from None


# -- requests counted -------------------------------------------------------------------------------------------
@dataclass
class RequestCount:
    """Requests sent, and bytes they brought back (``info``: the size and kind of an object, no bytes)."""

    requests: int = 0
    bytes: int = 0

    def add(self, nbytes: int) -> None:
        self.requests += 1
        self.bytes += nbytes


_TOTAL = RequestCount()
_TOTAL_LOCK = threading.Lock()


def _count(nbytes: int) -> None:
    with _TOTAL_LOCK:
        _TOTAL.add(nbytes)


def requests_made() -> RequestCount:
    """Requests (and bytes) this process has sent to object storage so far (``--verbose`` prints them).

    >>> isinstance(requests_made().requests, int)
    True
    """
    with _TOTAL_LOCK:
        return RequestCount(_TOTAL.requests, _TOTAL.bytes)


# -- reading ----------------------------------------------------------------------------------------------------
_INFO_SEEN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lodtool_info_seen", default=None)


@contextlib.contextmanager
def remembered_info() -> Iterator[None]:
    """Inside the block, :func:`info` asks about each URL once (opening a source asks what it is, then its size)."""
    token = _INFO_SEEN.set({} if _INFO_SEEN.get() is None else _INFO_SEEN.get())
    try:
        yield
    finally:
        _INFO_SEEN.reset(token)


def info(url: str, storage_options: Mapping[str, Any] | None = None) -> dict:
    """fsspec's ``info`` of ``url`` (one request): ``type`` (``file`` or ``directory``) and ``size``."""
    seen = _INFO_SEEN.get()
    if seen is not None and url in seen:
        return seen[url]
    fs, path = filesystem(url, storage_options)
    with translate(url, "cannot open it", storage_options):
        found = fs.info(path)
    _count(0)
    if seen is not None:
        seen[url] = found
    return found


def is_folder(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``url`` is a folder (a sharded container's prefix): a trailing ``/``, or what the store says."""
    if url.endswith("/"):
        return True
    try:
        return info(url, storage_options).get("type") == "directory"
    except LodFileNotFoundError:
        return False


def join(folder: str, name: str) -> str:
    """``folder/name`` for a URL (query strings are not part of object names here).

    >>> join("s3://b/corpus/", "lodtool.json"), join("s3://b/corpus", "part-00000.lod.h5")
    ('s3://b/corpus/lodtool.json', 's3://b/corpus/part-00000.lod.h5')
    """
    return folder.rstrip("/") + "/" + name


def read_bytes(url: str, limit: int, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The whole object at ``url`` (a manifest), refused above ``limit`` bytes."""
    fs, path = filesystem(url, storage_options)
    with translate(url, "cannot read it", storage_options):
        size = int(fs.info(path).get("size") or 0)
        _count(0)
        if size > limit:
            raise LodStorageError(f"{redact(url)}: {size:,} bytes, more than the {limit:,} it may hold")
        data = fs.cat_file(path)
    _count(len(data))
    return data


_FAILED = threading.local()
_GC_LOCK = threading.Lock()
_GC_PAUSES = [0, False]  # reads waiting on fsspec's event loop now; whether the collector ran before the first


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a read of libhdf5's waits on fsspec's event-loop thread.

    libhdf5 calls the read holding h5py's global lock; a collection run in the
    loop thread that frees an h5py object (a handle a caller dropped) waits for
    that lock, and the read waits for the loop: a deadlock.  Objects freed by
    their reference count are not at risk (the loop thread holds none).
    """
    import gc

    with _GC_LOCK:
        if _GC_PAUSES[0] == 0:
            _GC_PAUSES[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSES[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSES[0] -= 1
            if _GC_PAUSES[0] == 0 and _GC_PAUSES[1]:
                gc.enable()


def take_failure(name: str | None = None) -> LodError | None:
    """The typed error of the last object-storage read that failed in this thread, once (then forgotten);
    with ``name``, only if it was a read of that object (its URL as messages show it, :func:`redact`).

    libhdf5 turns a failed read of its file-object driver into a read error of
    its own; whoever translates that error asks here first.
    """
    failed = getattr(_FAILED, "error", None)
    _FAILED.error = None
    if failed is None or (name is not None and getattr(_FAILED, "name", None) != name):
        return None
    return failed


class _Kept:
    """What was read of one version of an object: its head, the runs read ahead (:data:`READ_AHEAD_BYTES`), and
    recent reads (:data:`KEPT_BYTES` at most)."""

    def __init__(self):
        self.head: bytes | None = None
        self.reads: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.nbytes = 0
        self.lock = threading.Lock()
        #: runs ``(start, stop)`` to read ahead, not fetched yet (``None``: not planned yet), in file order
        self.planned: list[tuple[int, int]] | None = None
        self.planned_stops: list[int] = []
        #: runs read ahead: their starts, and ``(stop, bytes)`` of each, in file order
        self.run_starts: list[int] = []
        self.runs: list[tuple[int, bytes]] = []

    def get(self, key: tuple[int, int]) -> bytes | None:
        data = self.reads.get(key)
        if data is not None:
            self.reads.move_to_end(key)
        return data

    def put(self, key: tuple[int, int], data: bytes) -> None:
        if len(data) > KEPT_READ_BYTES or key in self.reads:
            return
        self.reads[key] = data
        self.nbytes += len(data)
        while self.nbytes > KEPT_BYTES:
            self.nbytes -= len(self.reads.popitem(last=False)[1])

    def _run_holding(self, start: int, stop: int) -> int | None:
        """The index of the run read ahead that holds all of bytes ``start..stop``, or ``None``."""
        at = bisect.bisect_right(self.run_starts, start) - 1
        return at if at >= 0 and stop <= self.runs[at][0] else None

    def from_runs(self, start: int, stop: int) -> bytes | None:
        """Bytes ``start..stop`` if one run read ahead holds them all."""
        at = self._run_holding(start, stop)
        if at is None:
            return None
        first = self.run_starts[at]
        return self.runs[at][1][start - first:stop - first]

    def plan(self, runs: list[tuple[int, int]]) -> None:
        self.planned = runs
        self.planned_stops = [b for _, b in runs]

    def take_planned(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The planned runs within :data:`MERGE_GAP` of ``start..stop`` (fetched with it), no longer planned."""
        if not self.planned:
            return []
        first = bisect.bisect_left(self.planned_stops, start - MERGE_GAP)
        last = first
        while last < len(self.planned) and self.planned[last][0] - MERGE_GAP <= stop:
            last += 1
        near = self.planned[first:last]
        del self.planned[first:last], self.planned_stops[first:last]
        return near

    def holds(self, start: int, stop: int) -> bool:
        """Whether bytes ``start..stop`` are here: in the head, a run read ahead, or a kept read of exactly them."""
        if self.head is not None and stop <= len(self.head):
            return True
        return self._run_holding(start, stop) is not None or (start, stop) in self.reads

    def keep_run(self, start: int, data: bytes) -> None:
        at = bisect.bisect_left(self.run_starts, start)
        self.run_starts.insert(at, start)
        self.runs.insert(at, (start + len(data), data))


_KEPT: OrderedDict[tuple, _Kept] = OrderedDict()
_KEPT_LOCK = threading.Lock()


def _version(found: Mapping[str, Any]) -> tuple | None:
    """What tells one version of an object from the next (its ETag, else its size and time), or ``None``."""
    tag = found.get("ETag") or found.get("etag") or found.get("md5Hash") or found.get("generation")
    when = found.get("LastModified") or found.get("mtime") or found.get("created") or found.get("last_modified")
    if tag is None and when is None:
        return None
    return (str(tag), str(when), found.get("size"))


def _kept_for(url: str, version: tuple | None) -> _Kept:
    if version is None:  # nothing tells a rewritten object from the old one: this handle's own reads only
        return _Kept()
    key = (url, version)
    with _KEPT_LOCK:
        kept = _KEPT.get(key)
        if kept is None:
            kept = _KEPT[key] = _Kept()
            while len(_KEPT) > KEPT_OBJECTS:
                _KEPT.popitem(last=False)
        else:
            _KEPT.move_to_end(key)
        return kept


class RemoteFile(io.RawIOBase):
    """A read-only, seekable view of one object for libhdf5's file-object driver.

    The first read brings :data:`HEAD_BYTES` (or the whole object, if smaller)
    in one request; any other read is one range request of exactly its bytes.
    What was read is kept (:data:`KEPT_BYTES`), and shared by every handle on
    the same version of the object (same ETag), so nothing is asked for
    twice.  ``requests`` counts what this handle sent.  A failure is
    remembered as a typed lodtool error (:attr:`failure`), since libhdf5
    reports it only as a read error of its own.
    """

    def __init__(self, fs, path: str, url: str, size: int, storage_options: Mapping[str, Any],
                 version: tuple | None = None):
        super().__init__()
        self._fs = fs
        self._path = path
        self.url = url
        self.size = size
        self._options = dict(storage_options)
        self._pos = 0
        self._kept = _kept_for(url, version)
        self.requests = RequestCount()
        self.failure: LodError | None = None

    def __repr__(self) -> str:  # h5py names a file-object file by it
        return redact(self.url)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def _fetch(self, start: int, stop: int) -> bytes:
        try:
            with _collector_paused():
                data = self._fs.cat_file(self._path, start=start, end=stop)
        except Exception as exc:
            self.failure = _FAILED.error = storage_error(exc, self.url, f"cannot read bytes {start:,}..{stop:,}",
                                                         self._options)
            _FAILED.name = redact(self.url)
            raise self.failure from None
        self.requests.add(len(data))
        _count(len(data))
        if len(data) != stop - start:
            _FAILED.name = redact(self.url)
            self.failure = _FAILED.error = LodStorageError(
                f"{redact(self.url)}: asked for bytes {start:,}..{stop:,} of its {self.size:,} and got "
                f"{len(data):,} (the object changed while it was open?)")
            raise self.failure
        return data

    def read_range(self, start: int, stop: int) -> bytes:
        """Bytes ``start..stop`` (clipped to the object), from the head, a run read ahead, a kept read, or one
        request (which also brings the planned runs near it)."""
        stop = min(stop, self.size)
        if stop <= start:
            return b""
        kept = self._kept
        with kept.lock:
            if kept.head is None:
                kept.head = self._fetch(0, min(self.size, HEAD_BYTES))
            if stop <= len(kept.head):
                return kept.head[start:stop]
            data = kept.from_runs(start, stop)
            if data is not None:
                return data
            key = (start, stop)
            data = kept.get(key)
            if data is not None:
                return data
            runs = kept.take_planned(start, stop)
            if not runs:
                data = self._fetch(start, stop)
                kept.put(key, data)
                return data
            first, last = min(start, runs[0][0]), max(stop, runs[-1][1])
            whole = self._fetch(first, last)
            for a, b in runs:
                kept.keep_run(a, whole[a - first:b - first])
            data = whole[start - first:stop - first]
            if kept.from_runs(start, stop) is None:
                kept.put(key, data)
            return data

    def holds(self, ds) -> bool:
        """Whether every stored byte of ``ds`` (a dataset of the file this reads) is here already, so that reading
        it whole sends no request (a reader holds a dataset whole only then: fetching the rest would cost a
        request for each chunk not read yet, where a short read costs one)."""
        spans = _spans_of(ds)
        kept = self._kept
        with kept.lock:
            return all(kept.holds(a, b) for a, b in spans)

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read_range(self._pos, self._pos + len(view))
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes (``n`` at most :data:`HEAD_BYTES`)."""
        return self.read_range(0, n)

    def _twin(self) -> "RemoteFile":
        """Another handle on the same object and the same kept reads (a position of its own), counted with this one."""
        twin = RemoteFile(self._fs, self._path, self.url, self.size, self._options)
        twin._kept, twin.requests = self._kept, self.requests
        return twin


def _spans_of(ds) -> list[tuple[int, int]]:
    """Where a dataset's stored bytes lie in its file: each chunk, or its one contiguous block (none if compact)."""
    if ds.chunks:
        spans: list[tuple[int, int]] = []
        ds.id.chunk_iter(lambda chunk: spans.append((chunk.byte_offset, chunk.byte_offset + chunk.size)))
        return spans
    offset = ds.id.get_offset()
    return [] if offset is None else [(offset, offset + ds.id.get_storage_size())]


def _coalesced(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, those at most :data:`MERGE_GAP` apart joined into one.

    >>> _coalesced([(20000, 20500), (0, 100), (100, 200), (5000, 6000), (9000, 9500)])
    [(0, 200), (5000, 9500), (20000, 20500)]
    """
    runs: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if runs and a - runs[-1][1] <= MERGE_GAP:
            runs[-1] = (runs[-1][0], max(runs[-1][1], b))
        else:
            runs.append((a, b))
    return runs


def _plan_read_ahead(source: RemoteFile) -> None:
    """Plan what ``source`` reads ahead (once per version of an object): in a file laid out in pages, the chunks of its
    smallest datasets, up to :data:`READ_AHEAD_BYTES` and a :data:`READ_AHEAD_SHARE`-th of the object (a container's
    offsets, which every branch read looks up), joined into runs. A read that comes within :data:`MERGE_GAP` of a
    run fetches the run with it, in one request. Planning reads metadata only, which a paged file keeps in the head:
    it costs no request; a file in libhdf5's default layout (its metadata scattered) plans nothing, and neither does
    one that libhdf5 cannot open (its reader says why). A failed request is raised as its typed error.
    """
    kept = source._kept
    with kept.lock:
        if kept.planned is not None or source.size == 0:
            return
        kept.plan([])  # nothing is read ahead while planning
    import h5py

    probe = source._twin()
    spans: list[tuple[int, int]] = []
    try:
        with h5py.File(probe, "r") as h5:
            if h5.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE:
                datasets: list = []

                def visit(_, obj) -> bool | None:
                    if isinstance(obj, h5py.Dataset):
                        datasets.append(obj)
                    return len(datasets) >= PLANNED_DATASETS or None  # a file of many tensors: the first ones

                h5.visititems(visit)
                budget = min(READ_AHEAD_BYTES, source.size // READ_AHEAD_SHARE)
                for stored, ds in sorted(((ds.id.get_storage_size(), ds) for ds in datasets), key=lambda p: p[0]):
                    if stored > budget:
                        break
                    budget -= stored
                    spans += [(a, b) for a, b in _spans_of(ds) if b > HEAD_BYTES]
    except Exception:
        if probe.failure is not None:
            raise probe.failure from None
        return
    with kept.lock:
        kept.plan(_coalesced(spans))


def open_input(url: str, storage_options: Mapping[str, Any] | None = None, *, size: int | None = None) -> RemoteFile:
    """A :class:`RemoteFile` over the object at ``url`` (one ``info`` request unless ``size`` is known)."""
    given = dict(current_options() if storage_options is None else storage_options)
    fs, path = filesystem(url, given)
    version = None
    if size is None:
        found = info(url, given)
        if found.get("type") == "directory":
            raise LodStorageError(f"{redact(url)}: is a folder, not a lodtool container (a sharded folder needs "
                                  "its lodtool.json)")
        size = int(found.get("size") or 0)
        version = _version(found)
    source = RemoteFile(fs, path, url, size, given, version)
    _plan_read_ahead(source)
    return source


# -- writing (publishing a finished file is lodtool.atomic.publish's) -----------------------------------
def list_names(url: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The names of the objects directly under the folder ``url`` (``[]`` where there are none)."""
    fs, path = filesystem(url, storage_options)
    try:
        with translate(url, "cannot list it", storage_options):
            found = fs.ls(path.rstrip("/"), detail=False, refresh=True)
    except LodFileNotFoundError:
        return []
    _count(0)
    return [name.rstrip("/").rsplit("/", 1)[-1] for name in found]


def remove(url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Delete the object at ``url`` if it is there (undoing an upload that a later failure makes incomplete)."""
    fs, path = filesystem(url, current_options() if storage_options is None else storage_options)
    with contextlib.suppress(Exception):
        fs.rm_file(path)


def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether an object (or a folder) is at ``url``."""
    try:
        info(url, storage_options)
    except LodFileNotFoundError:
        return False
    return True


__all__ = ["is_url", "local_path", "absolute", "protocol", "redact", "scrub", "options", "current_options",
           "parse_option", "filesystem", "storage_error", "translate", "remembered_info", "RequestCount",
           "requests_made", "info", "is_folder", "join", "read_bytes", "RemoteFile", "open_input", "take_failure",
           "list_names", "remove", "exists", "PAGE_SIZE", "HEAD_BYTES", "READ_AHEAD_BYTES"]
