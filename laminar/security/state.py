"""The security part of the cluster metadata: users, ACLs and the decoy key,
applied from the same log as the topics (`laminar.replication.metadata`), with
no I/O.

- `SecurityState` holds a `CredentialStore`, an `AclSet` and the decoy key,
  and applies their entries; the metadata state machine routes every entry
  whose `op` is one of `SECURITY_OPS` here and keeps the rest.
- The decoy key (`laminar.security.scram`: the salt an unknown user name gets)
  must be the same on every node and across restarts, or a name's salt
  changing between nodes tells that it is unknown. It is written once, as its
  own entry (`{"op": "decoy_key", "key"}`), before the first user: until then
  there are no users, so every name is unknown alike and a node may use any
  key (`decoy_key_or`).
- The superusers the ACL decisions let through are the users flagged superuser
  plus those named by flag (`--superusers`, `set_flagged_superusers`); every
  user change recomputes them, which invalidates the cached decisions.
- A snapshot carries users, ACLs and the decoy key (`snapshot_body`); applying
  one replaces all three (`restore`). Snapshots written before users existed
  have none of these keys: they restore an empty store, which is what those
  logs held.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from laminar.security.acls import ACL_OPS, Acl, AclEntry, AclSet, AddAcls, RemoveAcls
from laminar.security.acls import decode_body as decode_acl_body
from laminar.security.acls import encode_entry as encode_acl_entry
from laminar.security.credentials import (
    USER_OPS,
    CredentialStore,
    DeleteUser,
    PutUser,
    UserEntry,
    encode_user,
)
from laminar.security.credentials import decode_body as decode_user_body
from laminar.security.credentials import encode_entry as encode_user_entry
from laminar.security.entries import pack
from laminar.security.errors import Refusal, SecurityRefusal

DECOY_KEY_BYTES: Final = 32
SECURITY_OPS: Final = USER_OPS | ACL_OPS | {"decoy_key"}
"""The `op` values of the entries this state applies."""


@dataclass(frozen=True, slots=True)
class SetDecoyKey:
    """The cluster's decoy key, written once before the first user."""

    key: bytes


SecurityEntry = UserEntry | AclEntry | SetDecoyKey


def encode_entry(entry: SecurityEntry) -> bytes:
    if isinstance(entry, SetDecoyKey):
        return pack({"op": "decoy_key", "key": entry.key})
    if isinstance(entry, PutUser | DeleteUser):
        return encode_user_entry(entry)
    return encode_acl_entry(entry)


def decode_body(body: dict[str, Any]) -> SecurityEntry | None:
    """The entry of an unpacked body whose op is in `SECURITY_OPS`, or None."""
    op = body.get("op")
    if op == "decoy_key":
        key = body.get("key")
        return SetDecoyKey(key) if type(key) is bytes and len(key) == DECOY_KEY_BYTES else None
    if op in USER_OPS:
        return decode_user_body(body)
    return decode_acl_body(body)


class SecurityState:
    """Users, ACLs and the decoy key as of the entries applied so far."""

    def __init__(self, max_users: int = 1000, max_acls: int = 10_000) -> None:
        self.users = CredentialStore(max_users)
        self.acls = AclSet(max_acls)
        self.decoy_key: bytes | None = None
        self._flagged: frozenset[str] = frozenset()

    def decoy_key_or(self, fallback: bytes) -> bytes:
        """The cluster's decoy key, or `fallback` while none is written (no users yet)."""
        return self.decoy_key if self.decoy_key is not None else fallback

    def set_flagged_superusers(self, principals: Iterable[str]) -> None:
        """Principals allowed everything by the node's flag, beside flagged users."""
        self._flagged = frozenset(principals)
        self._superusers_changed()

    def _superusers_changed(self) -> None:
        self.acls.set_superusers(self._flagged | self.users.superusers())

    def __len__(self) -> int:
        """Users and ACLs held (what a snapshot's size grows with)."""
        return len(self.users) + len(self.acls)

    # -- decisions (metadata leader only) ----------------------------------------

    def plan_decoy_key(self, key: bytes) -> SetDecoyKey:
        if self.decoy_key is not None:
            raise SecurityRefusal(Refusal.EXISTS, "the cluster has its decoy key already")
        if len(key) != DECOY_KEY_BYTES:
            raise ValueError(f"a decoy key has {DECOY_KEY_BYTES} bytes")
        return SetDecoyKey(key)

    # -- applying (every node) ------------------------------------------------------

    def apply(self, entry: SecurityEntry) -> None:
        if isinstance(entry, SetDecoyKey):
            if self.decoy_key is None:
                self.decoy_key = entry.key
        elif isinstance(entry, AddAcls | RemoveAcls):
            self.acls.apply(entry)
        elif self.users.apply(entry):
            self._superusers_changed()

    def snapshot_body(self) -> dict[str, Any]:
        """What a metadata snapshot stores of this state (keys absent when empty)."""
        body: dict[str, Any] = {}
        users = self.users.snapshot()
        if users:
            body["users"] = [encode_user(user) for user in users]
        acls = self.acls.acls()
        if acls:
            body["acls"] = [acl.to_wire() for acl in acls]
        if self.decoy_key is not None:
            body["decoy_key"] = self.decoy_key
        return body

    def restore(self, body: dict[str, Any]) -> None:
        """Replace the whole state with a snapshot's (`snapshot_body`); raises
        TypeError/ValueError for a body that is not one."""
        users = tuple(_put_user(item) for item in body.get("users") or ())
        acls = tuple(Acl.from_wire(item) for item in body.get("acls") or ())
        key = body.get("decoy_key")
        if key is not None and (type(key) is not bytes or len(key) != DECOY_KEY_BYTES):
            raise TypeError("decoy_key")
        self.users.restore(users)
        self.acls.restore(acls)
        self.decoy_key = key
        self._superusers_changed()


def _put_user(item: object) -> PutUser:
    entry = decode_user_body(item)
    if not isinstance(entry, PutUser):
        raise TypeError("a snapshot's user is not a put entry")
    return entry
