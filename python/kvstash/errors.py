"""Exceptions raised by kvstash: one class per kind of kvstash::Error (include/kvstash/error.h).

Every class derives from :class:`Error`; where a built-in exception means the same thing it is a base
too (``except ValueError`` catches :class:`InvalidArgument`, ``except OSError`` catches :class:`FileError`).
"""

from __future__ import annotations

__all__ = [
    "Error",
    "InvalidArgument",
    "ModelMismatch",
    "AdapterMismatch",
    "FileError",
    "OutputError",
    "BadInputFile",
    "Unsupported",
    "ContextOverflow",
    "InternalError",
]


class Error(Exception):
    """Base class of every kvstash error. ``code`` names the C++ ErrorCode."""

    code = "error"


class InvalidArgument(Error, ValueError):
    """A bad value: a flag, a size, a position, a token id, a state used by two threads at once."""

    code = "invalid_argument"


class ModelMismatch(InvalidArgument):
    """A state file belongs to another model (its weights + tokenizer fingerprint differs)."""

    code = "invalid_argument"


class AdapterMismatch(ModelMismatch):
    """A state file of this model was saved under other adapters (LoRA / control vectors) than it is loaded
    under: its KV was computed with other weights. Load it with the adapters it was saved with."""

    code = "invalid_argument"


class FileError(Error, OSError):
    """A file could not be opened, read, mapped or written."""

    code = "io"


class OutputError(FileError):
    """An output file could not be written (no space, no permission, a read-only target)."""

    code = "output"


class BadInputFile(Error):
    """A file's contents are malformed, truncated, corrupt (checksum) or hostile."""

    code = "bad_format"


class Unsupported(Error):
    """Well-formed but not something kvstash handles (tensor type, architecture, newer format)."""

    code = "unsupported"


class ContextOverflow(Error, IndexError):
    """A position or length outside what the model or the State's context allows."""

    code = "out_of_range"


class InternalError(Error):
    """A broken internal invariant: a bug in kvstash, please report it."""

    code = "internal"
