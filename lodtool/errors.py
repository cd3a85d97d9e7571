"""Domain exceptions.

Every lodtool error subclasses :class:`LodError` *and* the builtin a Python user
would already catch, so ``except ValueError`` keeps working.  The CLI turns any
``LodError`` into a one-line message and a non-zero exit code.

>>> from lodtool.errors import LodValidationError
>>> issubclass(LodValidationError, ValueError)
True
"""

from __future__ import annotations


class LodError(Exception):
    """Base class of every error lodtool raises on purpose."""

    #: exit code the CLI uses for this error (1: failed check / bad data, 2: usage)
    exit_code = 1


class LodValidationError(LodError, ValueError):
    """A LoD index breaks a rule (names level, index and values involved)."""


class LodIndexError(LodError, IndexError):
    """A branch path or a level/range is out of range."""


class LodShapeError(LodError, ValueError):
    """Arrays whose shapes or counts do not fit together."""


class LodDtypeError(LodError, TypeError):
    """A dtype lodtool refuses to store (object, strings, ...)."""


class LodInputError(LodError, ValueError):
    """Malformed ingest input (JSON, JSON Lines, NPY, NPZ)."""


class LodFormatError(LodError, ValueError):
    """A file that is not a valid lodtool container."""


class LodIsolationRequired(LodError, RuntimeError):
    """Decoding needs an opted-in plugin filter, which the CLI runs in an isolated child process."""


class LodVersionError(LodFormatError):
    """A lodtool container of a format version this lodtool cannot read."""


class LodChecksumError(LodFormatError):
    """Stored contents that do not match their recorded checksum."""


class LodReaderCrashError(LodFormatError):
    """The HDF5 reader crashed or hung on a file (caught by the isolated child process)."""


class LodFileNotFoundError(LodError, FileNotFoundError):
    """A named input file (or tensor inside a file) does not exist."""


class LodMemoryError(LodError, MemoryError):
    """An allocation a file asks for is above the configured memory limit."""


class LodBackendError(LodError, RuntimeError):
    """A requested compute backend (numba, cupy/CUDA) is unavailable."""


class LodStorageError(LodError, OSError):
    """Object storage (``s3://``, ``https://`` ...) failed a request; the message names the URL, never credentials."""


class LodAccessError(LodStorageError, PermissionError):
    """Object storage refused a request: no credentials, or access denied."""


class LodTimeoutError(LodStorageError, TimeoutError):
    """Object storage did not answer within the timeout (``timeout=`` among the storage options)."""


class LodUsageError(LodError, ValueError):
    """Options that contradict each other; the CLI exits with code 2."""

    exit_code = 2


class LodExistsError(LodError, FileExistsError):
    """An output would replace something that exists (a tensor, a file) without being told to; exit code 2."""

    exit_code = 2


__all__ = [
    "LodError",
    "LodValidationError",
    "LodIndexError",
    "LodShapeError",
    "LodDtypeError",
    "LodInputError",
    "LodFormatError",
    "LodVersionError",
    "LodIsolationRequired",
    "LodChecksumError",
    "LodReaderCrashError",
    "LodFileNotFoundError",
    "LodMemoryError",
    "LodBackendError",
    "LodStorageError",
    "LodAccessError",
    "LodTimeoutError",
    "LodUsageError",
    "LodExistsError",
]
