"""Users and ACLs from a client (`Client.create_user` and the rest, the same
on `AsyncClient`): the USERS and ACLS requests (`laminar.security.frames`).

- A password never leaves the client: `create_user` and `set_password`
  salt and hash it here (`scram.make_credential`, one credential per
  mechanism, so the user may log in with either) and send the keys.
- Requests go to the node's metadata owner shard; a change is made by the
  metadata leader (a NOT_LEADER answer names it and the call is sent there),
  a list answers what the node has applied.
- ACLs are `Acl` values; removing and listing take an `AclFilter` (its
  fields left None match anything; `AclFilter()` selects every ACL). An add
  of more than `ACLS_PER_REQUEST_MAX` ACLs is sent as several requests.
- What is idempotent is retried after a lost answer: a password change, an
  ACL add or remove (added again: already there), the lists. Creating and
  deleting a user are not (a second try would hear USER_EXISTS or
  UNKNOWN_USER about the first): a lost answer raises `OutcomeUnknownError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from laminar.client.calls import Call
from laminar.client.results import expect
from laminar.client.routing import Address, ClusterView
from laminar.security.acls import Acl, AclFilter
from laminar.security.credentials import UserInfo
from laminar.security.frames import (
    ACLS_PER_REQUEST_MAX,
    AclAction,
    AclsRequest,
    AclsResponse,
    UserAction,
    UsersRequest,
    UsersResponse,
)
from laminar.security.scram import ITERATIONS_DEFAULT, Mechanism, ScramCredential, make_credential
from laminar.wire import Frame, Message


def salted(password: str, iterations: int = ITERATIONS_DEFAULT) -> tuple[ScramCredential, ...]:
    """`password` as one salted credential per mechanism (ValueError for an
    empty or over-long one, or iterations out of bounds)."""
    return tuple(make_credential(m, password, iterations=iterations) for m in Mechanism)


def _node_call(
    what: str, request: Message, parse: Callable[[Frame], Any], idempotent: bool
) -> Call[Any]:
    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.node_route().address, request

    return Call(what, target, parse, idempotent=idempotent)


def _done(frame: Frame) -> None:
    expect(frame, UsersResponse)


def _users(frame: Frame) -> list[UserInfo]:
    return list(expect(frame, UsersResponse).users)


def _acls(frame: Frame) -> list[Acl]:
    return list(expect(frame, AclsResponse).acls)


def create_user(name: str, password: str, superuser: bool) -> Call[None]:
    request = UsersRequest(UserAction.CREATE, name, salted(password), superuser)
    return _node_call(f"create user {name!r}", request, _done, idempotent=False)


def set_password(name: str, password: str) -> Call[None]:
    request = UsersRequest(UserAction.SET_PASSWORD, name, salted(password))
    return _node_call(f"set the password of user {name!r}", request, _done, idempotent=True)


def delete_user(name: str) -> Call[None]:
    request = UsersRequest(UserAction.DELETE, name)
    return _node_call(f"delete user {name!r}", request, _done, idempotent=False)


def list_users() -> Call[list[UserInfo]]:
    return _node_call("list users", UsersRequest(UserAction.LIST), _users, idempotent=True)


def add_acls(acls: Iterable[Acl]) -> list[Call[list[Acl]]]:
    """One call per `ACLS_PER_REQUEST_MAX` ACLs; each answers those it added."""
    rows = tuple(acls)
    if not rows:
        raise ValueError("add_acls needs at least one ACL")
    return [
        _node_call(
            f"add {len(chunk)} ACLs",
            AclsRequest(AclAction.ADD, chunk),
            _acls,
            idempotent=True,
        )
        for chunk in (
            rows[i : i + ACLS_PER_REQUEST_MAX] for i in range(0, len(rows), ACLS_PER_REQUEST_MAX)
        )
    ]


def remove_acls(wanted: AclFilter) -> Call[list[Acl]]:
    request = AclsRequest(AclAction.REMOVE, filter=wanted)
    return _node_call("remove ACLs", request, _acls, idempotent=True)


def list_acls(wanted: AclFilter) -> Call[list[Acl]]:
    return _node_call(
        "list ACLs", AclsRequest(AclAction.LIST, filter=wanted), _acls, idempotent=True
    )
