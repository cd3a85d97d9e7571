"""Names and version of the lodtool container format, and strict version parsing.

This module is the single source of the format's vocabulary: every attribute
and member name the container uses is defined here, and the version rule
(:func:`check_version`) is applied to every file that is opened.  The full
specification is ``docs/format.md``.

>>> FORMAT_NAME, FORMAT_VERSION
('lodtool', '1.0')
>>> parse_version("1.0")
(1, 0)
>>> check_version({"lodtool_format": "lodtool", "lodtool_format_version": "1.3"}, "x.h5")
'1.3'
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from ..errors import LodFormatError, LodUsageError, LodVersionError
from ..tokens import TOKEN_FIELDS

#: value of the root attribute :data:`ATTR_FORMAT`
FORMAT_NAME = "lodtool"
#: the version this lodtool writes (a file that holds token metadata is :data:`TOKENS_VERSION`)
FORMAT_VERSION = "1.0"
#: the version of a file holding token metadata: an older writer must not append ids it cannot check
TOKENS_VERSION = "1.1"
#: major versions this lodtool reads (any minor version of each)
SUPPORTED_MAJORS = (1,)
#: the newest minor version of each supported major that this lodtool writes (appends need it)
WRITE_MINOR = {1: 1}

# -- root attributes ------------------------------------------------------------------------------
ATTR_FORMAT = "lodtool_format"
ATTR_VERSION = "lodtool_format_version"
ATTR_CREATED_BY = "lodtool_created_by"
ATTR_CHECKSUM = "lodtool_checksum"

# -- tensor group attributes and members ------------------------------------------------------------
ATTR_LOD_LEVEL = "lod_level"
ATTR_LEVEL_NAMES = "level_names"
ATTR_DTYPE = "dtype"
ATTR_COMPRESSION = "compression"
ATTR_COMPRESSION_LEVEL = "compression_level"
DATA = "data"
LOD = "lod"

# -- token metadata of a tensor (optional, :class:`lodtool.tokens.TokenInfo`; format 1.1) ----------------
#: each field of TokenInfo is a tensor group attribute of the same name
TOKEN_ATTRS = TOKEN_FIELDS
#: the tokenizer's JSON, a 1-D uint8 dataset in the tensor group (a ``_`` name: older readers ignore it)
TOKENIZER = "_tokenizer"

# -- dataset attributes ------------------------------------------------------------------------------
#: ``"<algorithm>:<hex digest>"`` of the dataset's full contents
ATTR_DIGEST = "checksum"

#: the checksum algorithm this lodtool writes (the one it can verify)
CHECKSUM_ALGORITHM = "xxh3_64"

#: a container may hold at most this many LoD levels per tensor (a sanity bound on untrusted files)
MAX_LOD_LEVEL = 64

_VERSION_RE = re.compile(r"^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})$")


def text_attr(value: Any) -> str | None:
    """An HDF5 attribute as ``str`` (h5py gives ``bytes`` or numpy strings for some writers).

    >>> text_attr(b"lodtool"), text_attr(3)
    ('lodtool', None)
    """
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        return value
    if hasattr(value, "shape") and getattr(value, "shape", None) == () and hasattr(value, "item"):
        return text_attr(value.item())
    return None


def parse_version(text: str) -> tuple[int, int]:
    """Parse ``"MAJOR.MINOR"`` strictly (no spaces, signs, leading zeros or extra parts).

    >>> parse_version("1.12")
    (1, 12)
    >>> parse_version("1.0.0")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodFormatError: format version '1.0.0' is not of the form MAJOR.MINOR
    """
    m = _VERSION_RE.match(text)
    if not m:
        raise LodFormatError(f"format version {text!r} is not of the form MAJOR.MINOR")
    return int(m.group(1)), int(m.group(2))


def supported_versions() -> str:
    """The versions this lodtool reads, in words: ``"1.x"``.

    >>> supported_versions()
    '1.x'
    """
    return ", ".join(f"{major}.x" for major in SUPPORTED_MAJORS)


def check_version(attrs: Mapping[str, Any], path: str) -> str:
    """Check a file's root attributes; return its format version string.

    A missing or foreign :data:`ATTR_FORMAT` is :class:`LodFormatError` ("not a
    lodtool container"); a major version this lodtool does not read is
    :class:`LodVersionError` naming the version found and the ones supported.
    Any minor version of a supported major is accepted (see ``docs/format.md``).

    >>> check_version({"lodtool_format": "lodtool", "lodtool_format_version": "2.0"}, "x.h5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodVersionError: x.h5: lodtool format version 2.0 is not supported (this lodtool reads 1.x)...
    >>> check_version({}, "x.h5")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodFormatError: x.h5: not a lodtool container (the root attribute 'lodtool_format' is missing)
    """
    if ATTR_FORMAT not in attrs:
        raise LodFormatError(f"{path}: not a lodtool container (the root attribute {ATTR_FORMAT!r} is missing)")
    name = text_attr(attrs[ATTR_FORMAT])
    if name != FORMAT_NAME:
        raise LodFormatError(f"{path}: not a lodtool container ({ATTR_FORMAT} is {short_repr(attrs[ATTR_FORMAT])}, "
                             f"expected {FORMAT_NAME!r})")
    if ATTR_VERSION not in attrs:
        raise LodFormatError(f"{path}: lodtool container without a format version "
                             f"(the root attribute {ATTR_VERSION!r} is missing)")
    text = text_attr(attrs[ATTR_VERSION])
    if text is None:
        raise LodFormatError(f"{path}: the format version {short_repr(attrs[ATTR_VERSION])} is not a string")
    try:
        major, _minor = parse_version(text)
    except LodFormatError as exc:
        raise LodFormatError(f"{path}: {exc}") from None
    if major not in SUPPORTED_MAJORS:
        raise LodVersionError(f"{path}: lodtool format version {text} is not supported "
                              f"(this lodtool reads {supported_versions()}); upgrade lodtool")
    return text


def check_writable_version(version: str, path: str) -> None:
    """Refuse to append to a file of a newer minor version than this lodtool writes.

    A newer minor version may carry optional parts that this writer would not
    keep consistent, so appending is refused rather than risked.

    >>> check_writable_version("1.0", "x.h5")
    >>> check_writable_version("1.7", "x.h5")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodVersionError: x.h5: cannot append to a format 1.7 file; this lodtool writes 1.1 (upgrade lodtool)
    """
    major, minor = parse_version(version)
    if minor > WRITE_MINOR.get(major, -1):
        newest = f"{major}.{WRITE_MINOR[major]}" if major in WRITE_MINOR else FORMAT_VERSION
        raise LodVersionError(f"{path}: cannot append to a format {version} file; this lodtool writes "
                              f"{newest} (upgrade lodtool)")


def control_characters(text: str) -> list[str]:
    """The control characters in ``text`` (C0, DEL, C1 and the bidirectional overrides), as ``repr`` shows them.

    A name holding them could retitle or clear a terminal, or forge a line of output.

    >>> control_characters("ok"), len(control_characters("a\\x1b[31mb\\n"))
    ([], 2)
    """
    return [repr(ch) for ch in text if ch < " " or "\x7f" <= ch <= "\x9f" or ch in _BIDI]


_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_name_text(name: str, what: str) -> str:
    """Refuse a name lodtool would write that holds control characters (see :func:`control_characters`).

    >>> check_name_text("\\x1b[2J", "tensor name")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: bad tensor name '\\x1b[2J': it holds the control character '\\x1b' ...
    """
    bad = control_characters(name)
    if bad:
        raise LodUsageError(f"bad {what} {name!r}: it holds the control character {bad[0]} (names must print "
                            "as they are)")
    return name
def split_tensor_ref(ref: Any) -> tuple[Any, str | None]:
    """``FILE:tensor`` -> ``(FILE, tensor)``; a path that exists (colons and all) -> ``(path, None)``.

    The part after the last ``:`` names a tensor when it holds no ``/`` and
    the whole string is not itself an existing file, so a real file name that
    contains ``:`` still works.  Streams and ``-`` pass through.

    >>> split_tensor_ref("multi.h5:tokens"), split_tensor_ref("a.h5"), split_tensor_ref("dir:x/a.h5")
    (('multi.h5', 'tokens'), ('a.h5', None), ('dir:x/a.h5', None))
    """
    if not isinstance(ref, (str, os.PathLike)):
        return ref, None
    text = os.fspath(ref)
    if text == "-" or ":" not in text or os.path.exists(text):
        return ref, None
    path, _, name = text.rpartition(":")
    if not path or not name or "/" in name:
        return ref, None
    return path, name


def resolve_tensor_ref(ref: Any, name: str | None) -> tuple[Any, str | None]:
    """:func:`split_tensor_ref`, checked against an explicit ``name`` (``--name``): both must agree.

    >>> resolve_tensor_ref("m.h5:a", None), resolve_tensor_ref("m.h5", "a"), resolve_tensor_ref("m.h5:a", "a")
    (('m.h5', 'a'), ('m.h5', 'a'), ('m.h5', 'a'))
    """
    path, in_ref = split_tensor_ref(ref)
    if in_ref is not None and name is not None and in_ref != name:
        raise LodUsageError(f"{os.fspath(ref)} names tensor {in_ref!r} but name={name!r} names another: give one")
    return path, in_ref if in_ref is not None else name


def check_tensor_name(name: Any) -> str:
    """A tensor name must be a non-empty string without ``/`` or control characters, not starting with ``_`` or ``.``.

    Names starting with ``_`` are reserved for future versions of the format.

    >>> check_tensor_name("tokens")
    'tokens'
    >>> check_tensor_name("a/b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: bad tensor name 'a/b': use a non-empty name without '/' ...
    """
    if (not isinstance(name, str) or not name or "/" in name or "\x00" in name
            or name.startswith(("_", "."))):
        raise LodUsageError(f"bad tensor name {name!r}: use a non-empty name without '/' that does not start "
                            "with '_' or '.'")
    return check_name_text(name, "tensor name")


def is_tensor_name(name: str) -> bool:
    """Whether a root member name is a tensor's (``_``-prefixed names are reserved and ignored).

    >>> is_tensor_name("tokens"), is_tensor_name("_index")
    (True, False)
    """
    return not name.startswith("_")


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 40 characters (what an error shows of a bad value read from a file).

    >>> short_repr("x" * 50)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    """
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "TOKENS_VERSION", "TOKEN_ATTRS", "TOKENIZER", "SUPPORTED_MAJORS", "CHECKSUM_ALGORITHM", "MAX_LOD_LEVEL",
    "parse_version", "check_version", "check_writable_version", "check_tensor_name", "is_tensor_name",
    "supported_versions", "text_attr", "control_characters", "check_name_text", "short_repr",
]
