"""Errors raised by the segmented log.

Every failure a caller can act on has its own type, and every message says what
happened and, where there is one, what to do about it.
"""

from __future__ import annotations


class LogError(Exception):
    """Base class of every error the log raises on purpose."""


class IndexOutOfRange(LogError, IndexError):
    """A read or truncate named an index the log does not hold."""


class RecordCorrupted(LogError):
    """A record's stored bytes no longer match the checksum taken at append time.

    The log never serves such bytes; it raises this instead.
    """


class AppendTooLarge(LogError, ValueError):
    """A batch is larger than a segment may ever hold (the append-threshold guard)."""


class LogClosed(LogError):
    """The log was closed; open it again to use it."""


class LogFailed(LogError):
    """A storage write or sync failed; appends are refused until the log is reopened.

    After a failed fdatasync the kernel may have dropped dirty pages, so the only
    safe way on is recovery from what is really on disk: reopen the log.
    """


class LogCorrupted(LogError):
    """The log's files are damaged in a way recovery must not repair silently.

    Recovery trims torn tails by itself; it raises this for damage that would
    lose records if trimmed (for example a segment header that names the wrong
    base index), so that a person can look before anything is deleted.
    """


class UnsupportedFormat(LogError):
    """The files were written in another on-disk format version; nothing is guessed."""
