"""Client security on laminar's wire (ops 27-29): the login exchange, users, ACLs.

- AUTHENTICATE carries one SCRAM message each way: the client's
  `{mechanism, message}` (client-first, then client-final), the server's
  `{message}` (server-first, then server-final). A refusal is an
  `ErrorResponse` AUTHENTICATION_FAILED with the reason the client may be
  told; the connection closes after it. A SCRAM message is at most
  `scram.MESSAGE_BYTES_MAX` bytes, so the frame is bounded by
  `AUTHENTICATE_FRAME_BYTES`.
- USERS is one op with an `action`: create | set-password | delete | list.
  A create or a password change carries credentials the client salted
  (`scram.make_credential`), one per mechanism, as
  `{"SCRAM-SHA-256": [salt, iterations, stored_key, server_key], ...}`:
  the password never travels. The list answers names, mechanisms and the
  superuser flag, never keys.
- ACLS is one op with an `action`: add | remove | list. An add carries at
  most `ACLS_PER_REQUEST_MAX` ACLs as six parallel columns (a request
  header is a map of scalars and flat lists, `REQUEST_HEADER_LIMITS`); a
  remove and a list carry one filter as scalar fields (absent: any). Every
  answer lists ACLs: those added (not those already there), removed, or
  selected.

Node-level: every frame is sent with partition id 0. USERS and ACLS go to
the metadata owner shard (the router's metadata ops); a list is answered
from that node's applied state, a change by the metadata leader only
(NOT_LEADER names it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self

from laminar.security.acls import (
    MATCH,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from laminar.security.credentials import UserInfo
from laminar.security.scram import MESSAGE_BYTES_MAX, Mechanism, ScramCredential
from laminar.wire import fields as f
from laminar.wire.codec import HEADER_OFFSET, Frame
from laminar.wire.errors import InvalidMessage
from laminar.wire.messages import REQUEST_TYPES, RESPONSE_TYPES, Message
from laminar.wire.ops import Flags, Op

AUTHENTICATE_FRAME_BYTES: Final = HEADER_OFFSET + MESSAGE_BYTES_MAX + 256
"""The most an AUTHENTICATE request frame may hold: one SCRAM message and a
mechanism name (the connection's decoder refuses more before buffering it)."""
ACLS_PER_REQUEST_MAX: Final = 64
"""ACLs one ACLS add carries (a request header's list holds at most 64 items);
the clients send more as several requests."""


class UserAction:
    CREATE: Final = "create"
    SET_PASSWORD: Final = "set-password"
    ALTER: Final = "alter"
    """Upsert some credentials and remove others (Kafka's AlterUserScramCredentials)."""
    DELETE: Final = "delete"
    LIST: Final = "list"


class AclAction:
    ADD: Final = "add"
    REMOVE: Final = "remove"
    LIST: Final = "list"


_USER_ACTIONS: Final = (
    UserAction.CREATE,
    UserAction.SET_PASSWORD,
    UserAction.ALTER,
    UserAction.DELETE,
    UserAction.LIST,
)
_ACL_ACTIONS: Final = (AclAction.ADD, AclAction.REMOVE, AclAction.LIST)


def _choice(h: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    v = f.string(h, key)
    if v not in allowed:
        raise InvalidMessage(f"header field {key!r} must be one of {', '.join(allowed)}")
    return v


def _enum(v: object, kind: type[Any], what: str) -> Any:
    try:
        return kind(v)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidMessage(f"{what} must be one of {allowed}, got {str(v)[:40]!r}") from None


# --- AUTHENTICATE ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthenticateRequest(Message):
    """One client message of a SCRAM exchange. Header: {mechanism, message}."""

    OP: ClassVar[int] = Op.AUTHENTICATE

    mechanism: str
    """A `scram.Mechanism` value; checked by the server (an unknown one is refused)."""
    message: bytes

    def _header(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "message": self.message}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.string(h, "mechanism"), f.binary(h, "message"))


@dataclass(frozen=True, slots=True)
class AuthenticateResponse(Message):
    """The server's next SCRAM message. Header: {message, done}: `done` once
    the client is logged in (the message is then the server's signature)."""

    OP: ClassVar[int] = Op.AUTHENTICATE
    FLAGS: ClassVar[int] = Flags.RESPONSE

    message: bytes
    done: bool = False

    def _header(self) -> dict[str, Any]:
        return {"message": self.message, "done": self.done}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.binary(h, "message"), f.flag(h, "done"))


# --- USERS -------------------------------------------------------------------------------


def _encode_credential(c: ScramCredential) -> list[Any]:
    return [c.salt, c.iterations, c.stored_key, c.server_key]


def _credentials(h: dict[str, Any]) -> tuple[ScramCredential, ...]:
    """The credentials in a header, one per mechanism key present (unchecked:
    the metadata's plan checks them)."""
    out = []
    for mechanism in Mechanism:
        v = h.get(mechanism.value)
        if v is None:
            continue
        if (
            type(v) is not list
            or len(v) != 4
            or type(v[0]) is not bytes
            or type(v[1]) is not int
            or type(v[2]) is not bytes
            or type(v[3]) is not bytes
        ):
            raise InvalidMessage(
                f"header field {mechanism.value!r} must be [salt, iterations, stored_key, "
                "server_key]"
            )
        out.append(ScramCredential(mechanism, v[0], v[1], v[2], v[3]))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class UsersRequest(Message):
    """Create, change the password of, alter the credentials of, delete or
    list users.

    Header: {action, name?, superuser?, <mechanism>: [salt, iterations,
    stored_key, server_key]..., removed?: [mechanism...] (alter)}.
    """

    OP: ClassVar[int] = Op.USERS

    action: str
    name: str = ""
    credentials: tuple[ScramCredential, ...] = ()
    superuser: bool = False
    removed: tuple[Mechanism, ...] = ()
    """Alter: the mechanisms whose credentials go (the others are upserted)."""

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"action": self.action}
        if self.action != UserAction.LIST:
            h["name"] = self.name
        if self.superuser:
            h["superuser"] = True
        for c in self.credentials:
            h[c.mechanism.value] = _encode_credential(c)
        if self.removed:
            h["removed"] = [m.value for m in self.removed]
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        action = _choice(h, "action", _USER_ACTIONS)
        if action == UserAction.LIST:
            return cls(action)
        name = f.string(h, "name")
        if action == UserAction.DELETE:
            return cls(action, name)
        credentials = _credentials(h)
        if action == UserAction.ALTER:
            removed = _removed(h.get("removed", []))
            if not credentials and not removed:
                raise InvalidMessage("a user alter upserts or removes at least one credential")
            if {c.mechanism for c in credentials} & set(removed):
                raise InvalidMessage("a user alter both upserts and removes one mechanism")
            return cls(action, name, credentials, removed=removed)
        if not credentials:
            raise InvalidMessage(f"a user {action} carries at least one salted credential")
        return cls(action, name, credentials, f.flag(h, "superuser"))


def _removed(v: object) -> tuple[Mechanism, ...]:
    if type(v) is not list or len(v) > len(Mechanism):
        raise InvalidMessage("header field 'removed' must list mechanisms")
    removed = tuple(_enum(m, Mechanism, "a mechanism") for m in v)
    if len(set(removed)) != len(removed):
        raise InvalidMessage("header field 'removed' names a mechanism twice")
    return removed


def _encode_user(user: UserInfo) -> list[Any]:
    return [user.name, [m.value for m in user.mechanisms], user.superuser]


def _user(v: object) -> UserInfo:
    if (
        type(v) is not list
        or len(v) != 3
        or type(v[0]) is not str
        or type(v[1]) is not list
        or type(v[2]) is not bool
    ):
        raise InvalidMessage("each user must be [name, [mechanism, ...], superuser]")
    mechanisms = tuple(_enum(m, Mechanism, "a mechanism") for m in v[1])
    return UserInfo(v[0], mechanisms, v[2])


@dataclass(frozen=True, slots=True)
class UsersResponse(Message):
    """Done; for a list, every user. Header: {users: [[name, [mechanism...], superuser]]}."""

    OP: ClassVar[int] = Op.USERS
    FLAGS: ClassVar[int] = Flags.RESPONSE

    users: tuple[UserInfo, ...] = ()

    def _header(self) -> dict[str, Any]:
        return {"users": [_encode_user(u) for u in self.users]}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        raw = frame.header.get("users", [])
        if type(raw) is not list:
            raise InvalidMessage("header field 'users' must be a list")
        return cls(tuple(_user(v) for v in raw))


# --- ACLS --------------------------------------------------------------------------------

_COLUMNS: Final = ("principal", "resource_type", "pattern", "name", "operation", "permission")


def _acl(values: list[Any]) -> Acl:
    try:
        return Acl.from_wire(values)
    except (TypeError, ValueError):
        raise InvalidMessage(
            "an ACL is [principal, topic|group|cluster, literal|prefixed, name, "
            "operation, allow|deny]"
        ) from None


def _acl_columns(h: dict[str, Any]) -> tuple[Acl, ...]:
    columns = [f.strings(h, key) for key in _COLUMNS]
    rows = len(columns[0])
    if not 0 < rows <= ACLS_PER_REQUEST_MAX or any(len(c) != rows for c in columns):
        raise InvalidMessage(
            f"an ACL add carries 1-{ACLS_PER_REQUEST_MAX} ACLs as six columns of equal length"
        )
    return tuple(_acl(list(row)) for row in zip(*columns, strict=True))


def _encode_filter(wanted: AclFilter) -> dict[str, Any]:
    h: dict[str, Any] = {}
    for key in _COLUMNS:
        v = getattr(wanted, key)
        if v is not None:
            h[key] = str(v)
    return h


def _filter(h: dict[str, Any]) -> AclFilter:
    def opt(key: str, kind: type[Any] | None = None) -> Any:
        v = f.opt_string(h, key)
        return v if v is None or kind is None else _enum(v, kind, f"header field {key!r}")

    pattern = f.opt_string(h, "pattern")
    if pattern is not None and pattern != MATCH:
        pattern = _enum(pattern, PatternType, "header field 'pattern'")
    return AclFilter(
        opt("principal"),
        opt("resource_type", ResourceType),
        pattern,  # type: ignore[arg-type]  # checked: a PatternType or MATCH
        opt("name"),
        opt("operation", Operation),
        opt("permission", Permission),
    )


@dataclass(frozen=True, slots=True)
class AclsRequest(Message):
    """Add ACLs, or remove or list those a filter selects.

    Header: add: {action, principal: [...], resource_type: [...], pattern:
    [...], name: [...], operation: [...], permission: [...]}; remove, list:
    {action, principal?, resource_type?, pattern?, name?, operation?, permission?}.
    """

    OP: ClassVar[int] = Op.ACLS

    action: str
    acls: tuple[Acl, ...] = ()
    """For an add."""
    filter: AclFilter = field(default_factory=AclFilter)
    """For a remove or a list."""

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"action": self.action}
        if self.action == AclAction.ADD:
            rows = [acl.to_wire() for acl in self.acls]
            for i, key in enumerate(_COLUMNS):
                h[key] = [row[i] for row in rows]
        else:
            h.update(_encode_filter(self.filter))
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        action = _choice(h, "action", _ACL_ACTIONS)
        if action == AclAction.ADD:
            return cls(action, _acl_columns(h))
        return cls(action, filter=_filter(h))


@dataclass(frozen=True, slots=True)
class AclsResponse(Message):
    """The ACLs added, removed or listed. Header: {acls: [[principal, type,
    pattern, name, operation, permission], ...]}."""

    OP: ClassVar[int] = Op.ACLS
    FLAGS: ClassVar[int] = Flags.RESPONSE

    acls: tuple[Acl, ...] = ()

    def _header(self) -> dict[str, Any]:
        return {"acls": [acl.to_wire() for acl in self.acls]}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        raw = frame.header.get("acls", [])
        if type(raw) is not list:
            raise InvalidMessage("header field 'acls' must be a list")
        return cls(tuple(_acl(v) for v in raw))


SECURITY_REQUESTS: tuple[type[Message], ...] = (AuthenticateRequest, UsersRequest, AclsRequest)
SECURITY_RESPONSES: tuple[type[Message], ...] = (
    AuthenticateResponse,
    UsersResponse,
    AclsResponse,
)
REQUEST_TYPES.update({cls.OP: cls for cls in SECURITY_REQUESTS})  # type: ignore[misc]
RESPONSE_TYPES.update({cls.OP: cls for cls in SECURITY_RESPONSES})  # type: ignore[misc]
