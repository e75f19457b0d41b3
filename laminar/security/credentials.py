"""The users that may log in, and their SCRAM credentials: a state machine
applied from metadata log entries, with no I/O.

Rules, as the topic metadata (`laminar.replication.metadata`) has them:

- The store after entry n is a pure function of the entries up to n: every node
  applies the same entries in order and holds the same users.
- Only the metadata leader *decides* (`plan_create`, `plan_set_credentials`,
  `plan_delete`): it checks a request against the current state and returns the
  entry to append, or raises `SecurityRefusal`. Applying never fails: an entry
  that no longer makes sense (a user deleted meanwhile, a store already full
  because two creates were planned before either applied) is a no-op, so a
  replay can never get stuck.
- Entries are msgpack maps, beside the topic entries in the same log:
  `{"op": "user_put", "name", "superuser", "scram": [[mechanism, salt,
  iterations, stored_key, server_key], ...]}` (a create or a password change:
  the user's whole credential set) and `{"op": "user_delete", "name"}`. A
  snapshot of the metadata carries `users()` as put entries (`encode_user`).
  Bytes that do not decode are `None` from `decode_entry`: skipped, never
  guessed at.
- Never a password: only salted keys (`laminar.security.scram`), which check a
  proof and cannot make one. Listing shows names, mechanisms and the
  superuser flag, never keys.
- Bounds: at most `max_users` users (every node holds them all in memory);
  names of 1-64 characters from A-Z a-z 0-9 . _ - @ +, so a name needs no
  escaping in SCRAM (`=` and `,`), in a principal (`:`) or in an ACL (`*`).
- A superuser (the bootstrap user, `--bootstrap-user-file`) is allowed
  everything whatever the ACLs say (`laminar.security.acls`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from laminar.security.entries import pack, unpack
from laminar.security.errors import Refusal, SecurityRefusal
from laminar.security.principal import user_principal
from laminar.security.scram import Mechanism, ScramCredential

USER_NAME_MAX: Final = 64
_USER_NAME_RE: Final = re.compile(r"[A-Za-z0-9._@+-]+")
USER_OPS: Final = frozenset({"user_put", "user_delete"})
"""The `op` values of this module's entries (the metadata decoder routes them here)."""


@dataclass(frozen=True, slots=True)
class PutUser:
    """Create user `name`, or replace its credentials and flag."""

    name: str
    credentials: tuple[ScramCredential, ...]
    """One per mechanism, in mechanism order."""
    superuser: bool = False


@dataclass(frozen=True, slots=True)
class DeleteUser:
    name: str


UserEntry = PutUser | DeleteUser


@dataclass(frozen=True, slots=True)
class UserInfo:
    """What a listing shows of a user (never its keys)."""

    name: str
    mechanisms: tuple[Mechanism, ...]
    superuser: bool

    @property
    def principal(self) -> str:
        return user_principal(self.name)


def check_user_name(name: str) -> None:
    """Raise `SecurityRefusal` unless `name` can name a user."""
    if not 0 < len(name) <= USER_NAME_MAX or not _USER_NAME_RE.fullmatch(name):
        raise SecurityRefusal(
            Refusal.INVALID,
            f"invalid user name {name[:60]!r}: use 1-{USER_NAME_MAX} characters "
            "from A-Z a-z 0-9 . _ - @ +",
        )


def _checked_credentials(
    credentials: tuple[ScramCredential, ...],
) -> tuple[ScramCredential, ...]:
    mechanisms = [c.mechanism for c in credentials]
    if not credentials or len(set(mechanisms)) != len(mechanisms):
        raise SecurityRefusal(
            Refusal.INVALID, "a user needs one credential per mechanism, at least one"
        )
    for credential in credentials:
        try:
            credential.check()
        except ValueError as exc:
            raise SecurityRefusal(Refusal.INVALID, str(exc)) from None
    return tuple(sorted(credentials, key=lambda c: c.mechanism.value))


class CredentialStore:
    """The users as of the entries applied so far."""

    def __init__(self, max_users: int = 1000) -> None:
        self.max_users = max_users
        self._users: dict[str, PutUser] = {}
        self.removals = 0
        """Moves whenever a user may have gone (a delete, a snapshot restored):
        what logged-in connections compare per request (`Login.current`).
        Volatile, this node's own: not part of the state."""

    # -- queries -----------------------------------------------------------------

    def credential(self, name: str, mechanism: Mechanism) -> ScramCredential | None:
        """`name`'s credential for `mechanism` (None: no such user, or none for
        that mechanism): the lookup `scram.ScramServer` takes."""
        user = self._users.get(name)
        if user is None:
            return None
        return next((c for c in user.credentials if c.mechanism is mechanism), None)

    def users(self) -> tuple[UserInfo, ...]:
        """Every user, by name."""
        return tuple(
            UserInfo(u.name, tuple(c.mechanism for c in u.credentials), u.superuser)
            for u in sorted(self._users.values(), key=lambda u: u.name)
        )

    def __len__(self) -> int:
        return len(self._users)

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def superusers(self) -> frozenset[str]:
        """The principals of the superusers."""
        return frozenset(user_principal(u.name) for u in self._users.values() if u.superuser)

    def snapshot(self) -> tuple[PutUser, ...]:
        """The whole store as entries that rebuild it (`restore`)."""
        return tuple(self._users[name] for name in sorted(self._users))

    # -- decisions (metadata leader only) --------------------------------------

    def plan_create(
        self, name: str, credentials: tuple[ScramCredential, ...], superuser: bool = False
    ) -> PutUser:
        check_user_name(name)
        checked = _checked_credentials(credentials)
        if name in self._users:
            raise SecurityRefusal(Refusal.EXISTS, f"user {name!r} already exists")
        if len(self._users) >= self.max_users:
            raise SecurityRefusal(
                Refusal.LIMIT,
                f"the cluster holds its limit of {self.max_users} users; delete one first",
            )
        return PutUser(name, checked, superuser)

    def plan_set_credentials(self, name: str, credentials: tuple[ScramCredential, ...]) -> PutUser:
        """The entry that replaces `name`'s credentials (a password change)."""
        user = self._known(name)
        return PutUser(name, _checked_credentials(credentials), user.superuser)

    def plan_alter(
        self,
        name: str,
        upserts: tuple[ScramCredential, ...],
        removed: tuple[Mechanism, ...],
    ) -> UserEntry:
        """The entry that applies `upserts` and `removed` to the credentials
        `name` has when it is planned (under the metadata leader's write lock:
        two admins altering one user's mechanisms both land). Kafka's model: a
        user that does not exist is made (not a superuser), one left without
        credentials is deleted; removing a credential it lacks is refused."""
        user = self._users.get(name)
        credentials = {c.mechanism: c for c in user.credentials} if user is not None else {}
        for mechanism in removed:
            if credentials.pop(mechanism, None) is None:
                raise SecurityRefusal(
                    Refusal.UNKNOWN, f"user {name[:64]!r} has no {mechanism.value} credential"
                )
        credentials.update((c.mechanism, c) for c in upserts)
        if user is None:
            return self.plan_create(name, tuple(credentials.values()))
        if not credentials:
            return DeleteUser(name)
        return PutUser(name, _checked_credentials(tuple(credentials.values())), user.superuser)

    def plan_delete(self, name: str) -> DeleteUser:
        self._known(name)
        return DeleteUser(name)

    def _known(self, name: str) -> PutUser:
        user = self._users.get(name)
        if user is None:
            raise SecurityRefusal(Refusal.UNKNOWN, f"no user named {name[:64]!r}")
        return user

    # -- applying (every node) ------------------------------------------------------

    def apply(self, entry: UserEntry) -> bool:
        """Apply one entry; True if it changed the store."""
        if isinstance(entry, DeleteUser):
            removed = self._users.pop(entry.name, None) is not None
            self.removals += removed
            return removed
        if entry.name not in self._users and len(self._users) >= self.max_users:
            return False
        if self._users.get(entry.name) == entry:
            return False
        self._users[entry.name] = entry
        return True

    def restore(self, users: tuple[PutUser, ...]) -> None:
        """Replace the whole store with a snapshot's users."""
        self._users = {}
        self.removals += 1
        for user in users:
            self.apply(user)


def encode_user(user: PutUser) -> dict[str, Any]:
    """A put entry's msgpack body (a snapshot lists these)."""
    return {
        "op": "user_put",
        "name": user.name,
        "superuser": user.superuser,
        "scram": [
            [c.mechanism.value, c.salt, c.iterations, c.stored_key, c.server_key]
            for c in user.credentials
        ],
    }


def encode_entry(entry: UserEntry) -> bytes:
    if isinstance(entry, PutUser):
        return pack(encode_user(entry))
    return pack({"op": "user_delete", "name": entry.name})


def decode_entry(value: bytes) -> UserEntry | None:
    """The entry in `value`, or None if it is not a valid user entry."""
    return decode_body(unpack(value))


def decode_body(body: object) -> UserEntry | None:
    """A user entry from its unpacked msgpack body, or None."""
    if type(body) is not dict:
        return None
    try:
        name = body["name"]
        if type(name) is not str:
            return None
        check_user_name(name)
        if body["op"] == "user_delete":
            return DeleteUser(name)
        if body["op"] != "user_put" or type(body["superuser"]) is not bool:
            return None
        credentials = tuple(_credential(item) for item in body["scram"])
        return PutUser(name, _checked_credentials(credentials), body["superuser"])
    except (KeyError, TypeError, ValueError, SecurityRefusal):
        return None


def _credential(item: object) -> ScramCredential:
    if type(item) is not list or len(item) != 5:
        raise TypeError
    mechanism, salt, iterations, stored_key, server_key = item
    if type(iterations) is not int or not all(
        type(b) is bytes for b in (salt, stored_key, server_key)
    ):
        raise TypeError
    return ScramCredential(Mechanism(mechanism), salt, iterations, stored_key, server_key)
