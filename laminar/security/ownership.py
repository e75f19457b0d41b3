"""Owned things: an atomic write and a consumer group member belong to the
principal that began them, and only that principal may act on them.

- An owner is a principal (`User:NAME`) or None: what a node without logins
  (and the node's own requests) record.
- A client's request may act on a thing only if its principal is the owner,
  exactly: on a node with logins a thing made without them (owner None) is
  nobody's to take over, and the other way round; such leftovers expire as
  usual.
- The node's own traffic (sibling channels, peer sessions: a coordinator's
  check, an expiry's question) is not a client's and is never refused here;
  it carries the owner it acts for where a rule needs it.
- Commit ids are per principal (`decided_id`): a client's commit, abort or
  status is decided under an id derived from its principal and the id it
  sent, so a principal that knows or guesses another's id (a Spark stream's
  ids follow from its query id and batch number) cannot take it first, by
  aborting or committing it, and the owner's later commit still decides.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

DECIDED_ID_PERSON = b"laminar-commit"
"""The BLAKE2b personalisation of `decided_id` (a domain of its own)."""


class Requester(Protocol):
    """Who sent a request, as the shard's request context says
    (`laminar.shards.handlers.RequestContext` is one)."""

    @property
    def principal(self) -> str | None: ...

    @property
    def from_client(self) -> bool: ...


def may_act_for(owner: str | None, requester: Requester) -> bool:
    """May `requester` act on a thing `owner` began? (The module docstring's rule.)"""
    return not requester.from_client or requester.principal == owner


def not_owner_message(thing: str, requester: Requester) -> str:
    """What a refused requester is told (never who the owner is)."""
    who = requester.principal or "a client that has not logged in"
    return f"{thing} belongs to another principal than {who}; nothing was applied"


def decided_id(commit_id: int, requester: Requester, buckets: int) -> int:
    """The id `requester`'s commit `commit_id` is decided under: `commit_id`
    itself for a node without logins and for the node's own traffic (which
    carries decided ids already); else a 64-bit BLAKE2b of (principal, id)
    moved to `commit_id`'s residue mod `buckets`, so that it routes to the
    same coordinator as the id the client sent."""
    principal = requester.principal
    if not requester.from_client or principal is None:
        return commit_id
    digest = hashlib.blake2b(
        principal.encode() + b"\0" + commit_id.to_bytes(8, "big"),
        digest_size=8,
        person=DECIDED_ID_PERSON,
    ).digest()
    mixed = int.from_bytes(digest, "big")
    return mixed - mixed % buckets + commit_id % buckets
