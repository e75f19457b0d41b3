"""Errors of the groups cores: refusals a caller is told, and local misuse.

A refusal is a `GroupError` code in an answer (the request was wrong or stale,
nothing changed); an exception is raised only for misuse by the shell (bad
arguments it should have checked) or a log that breaks an invariant.
"""

from __future__ import annotations

from enum import IntEnum


class GroupError(IntEnum):
    """Why a request was refused; NONE when it was not."""

    NONE = 0
    FENCED = 1
    """The member is unknown, its epoch is not its current one, or it does not
    hold the partition: its commit is never applied."""
    STALE_EPOCH = 11
    """A commit at an epoch older than the member's: its heartbeat answer
    moving it on is still on its way. Retriable after the next heartbeat;
    not applied."""
    UNKNOWN_MEMBER = 2
    """A heartbeat from a member the group does not know (left or expired):
    drop every partition and join again."""
    INSTANCE_IN_USE = 3
    """A static member joined with an instance id another live member holds;
    retry once that member has left or its session expired."""
    POSITION_BEHIND = 4
    """A member's commit below the committed position: positions only move forward."""
    POSITION_BEYOND_END = 5
    """A commit or reset past the partition's end."""
    GROUP_NOT_EMPTY = 6
    """Reset and delete need a group without members."""
    UNKNOWN_GROUP = 7
    LIMIT = 8
    """An input over one of the `Limits`."""
    INVALID = 9
    """A malformed request (empty group id, unknown assignor, bad epoch...)."""
    UNKNOWN_PARTITION = 10
    """A reset of a partition the topic does not have."""


class RecordCodecError(ValueError):
    """Bytes that do not decode to a valid positions-log record."""


class GroupStateError(Exception):
    """Records that break an invariant of the fold (a partition held by two
    members): a bug or a damaged log, never a refusal."""
