"""The USERS and ACLS ops on a shard, and AUTHENTICATE where no login is due.

USERS and ACLS reach the metadata owner shard (the router's metadata ops).
A change goes through `MetadataService` (the metadata leader plans and
appends it; elsewhere NOT_LEADER names the leader, as for topics); a list
answers from this node's applied `SecurityState`, with no round trip.
Who may do which is the authorization's to decide (ALTER / DESCRIBE on the
cluster), not this module's.

AUTHENTICATE is served by the connection while a login is due
(`laminar.shards.connection`); one that reaches the dispatcher came on a
connection that has logged in already, or to a node without --auth: both are
refused, and the connection carries on.
"""

from __future__ import annotations

from collections.abc import Mapping

from laminar.replication.metalog import MetadataService
from laminar.security.frames import (
    AclAction,
    AclsRequest,
    AclsResponse,
    UserAction,
    UsersRequest,
    UsersResponse,
)
from laminar.shards.dispatch import Handler
from laminar.shards.handlers import RequestContext
from laminar.wire import ErrorCode, Op
from laminar.wire.codec import Buffer
from laminar.wire.errors import RequestError


class SecurityOps:
    """Handlers for AUTHENTICATE, USERS and ACLS (see the module docstring)."""

    def __init__(self, metadata: MetadataService, authenticated: bool) -> None:
        self.metadata = metadata
        self.authenticated = authenticated

    def table(self) -> Mapping[int, Handler]:
        return {Op.AUTHENTICATE: self.authenticate, Op.USERS: self.users, Op.ACLS: self.acls}

    async def authenticate(self, _req: object, _corr: int, _ctx: RequestContext) -> list[Buffer]:
        if self.authenticated:
            raise RequestError(
                ErrorCode.INVALID_REQUEST, "this connection has logged in already (one login each)"
            )
        raise RequestError(
            ErrorCode.INVALID_REQUEST,
            "this node takes no logins (--auth none): connect without a user name",
        )

    async def users(self, req: UsersRequest, corr: int, _ctx: RequestContext) -> list[Buffer]:
        metadata = self.metadata
        if req.action == UserAction.LIST:
            await metadata.ready()
            return UsersResponse(metadata.state.security.users.users()).encode_buffers(corr)
        if req.action == UserAction.CREATE:
            await metadata.create_user(req.name, req.credentials, req.superuser)
        elif req.action == UserAction.SET_PASSWORD:
            await metadata.set_user_credentials(req.name, req.credentials)
        elif req.action == UserAction.ALTER:
            await metadata.alter_user_credentials(req.name, req.credentials, req.removed)
        else:
            await metadata.delete_user(req.name)
        return UsersResponse().encode_buffers(corr)

    async def acls(self, req: AclsRequest, corr: int, _ctx: RequestContext) -> list[Buffer]:
        metadata = self.metadata
        if req.action == AclAction.ADD:
            changed = await metadata.add_acls(req.acls)
        elif req.action == AclAction.REMOVE:
            changed = await metadata.remove_acls((req.filter,))
        else:
            await metadata.ready()
            changed = metadata.state.security.acls.select(req.filter)
        return AclsResponse(changed).encode_buffers(corr)
