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
"""

from __future__ import annotations

from typing import Protocol


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
