"""Kafka's ACL and SCRAM-user admin APIs on the Kafka door.

DescribeAcls (29), CreateAcls (30), DeleteAcls (31),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), as
kafka-python's KafkaAdminClient and confluent-kafka's AdminClient send them,
mapped onto `laminar.security` by `laminar.kafka.acls`.

- Descriptions are answered from this shard's applied `SecurityState` (every
  shard holds it): no round trip.
- Changes go to the metadata leader as laminar's own USERS and ACLS requests
  (`laminar.security.frames`), the way a topic creation does: through this
  node's metadata owner shard, then, on NOT_LEADER, to the leader it names
  (`NodeRoutes.to_leader`), so one code path decides them whichever door
  asked. Kafka clients send these to any broker, not to the controller.
- Authorization (with --auth): describing needs DESCRIBE on the cluster,
  changing ALTER on the cluster; a refusal is CLUSTER_AUTHORIZATION_FAILED in
  every result, and nothing is changed.
- AlterUserScramCredentials: the client sends PBKDF2(password, salt,
  iterations); the user's StoredKey and ServerKey are derived from it here and
  only they are stored. Per user, the request's deletions and upsertions make
  the user's new set of credentials: an upsertion for a user that does not
  exist creates it (not a superuser); deleting a user's last credential
  deletes the user (Kafka's model: a user is its credentials). A user named
  twice in one request, or a mechanism both deleted and upserted, answers
  DUPLICATE_RESOURCE; deleting a credential the user does not have answers
  RESOURCE_NOT_FOUND. The change goes to the metadata leader as it was asked
  (one USERS "alter") and the new set is planned there on the state the
  entry lands on, so two admins changing one user's mechanisms at the same
  moment both land.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from laminar.kafka import messages as m
from laminar.kafka.acls import (
    MECHANISMS,
    acl_of,
    code_of,
    deleted,
    described,
    filter_fields,
    filter_of,
    upserted_credential,
)
from laminar.kafka.errors import ErrorCode as Kafka
from laminar.kafka.errors import KafkaError
from laminar.security.acls import CLUSTER, Acl, Operation, Resource
from laminar.security.frames import (
    ACLS_PER_REQUEST_MAX,
    AclAction,
    AclsRequest,
    AclsResponse,
    UserAction,
    UsersRequest,
)
from laminar.security.scram import Mechanism, ScramCredential
from laminar.security.state import SecurityState
from laminar.shards.handlers import RequestContext
from laminar.wire import Frame, Message

Denied = Callable[[RequestContext, Operation, Resource], bool]
ToLeader = Callable[[Message], Awaitable[Frame]]
"""Sends a laminar request to the metadata leader; its failure raised as a KafkaError."""

CLUSTER_REFUSED: Final = Kafka.CLUSTER_AUTHORIZATION_FAILED


class KafkaSecurityAdmin:
    """Serves the Kafka ACL and SCRAM-user APIs (see the module docstring)."""

    def __init__(
        self, security: Callable[[], SecurityState], denied: Denied, to_leader: ToLeader
    ) -> None:
        self._security = security
        self._denied = denied
        self._to_leader = to_leader

    def table(self) -> dict[type, Callable[[Any, RequestContext], Awaitable[Any]]]:
        return {
            m.DescribeAclsRequest: self.describe_acls,
            m.CreateAclsRequest: self.create_acls,
            m.DeleteAclsRequest: self.delete_acls,
            m.DescribeUserScramCredentialsRequest: self.describe_users,
            m.AlterUserScramCredentialsRequest: self.alter_users,
        }

    # -- ACLs -------------------------------------------------------------------------

    async def describe_acls(
        self, req: m.DescribeAclsRequest, ctx: RequestContext
    ) -> m.DescribeAclsResponse:
        if self._denied(ctx, Operation.DESCRIBE, CLUSTER):
            return m.DescribeAclsResponse(
                error_code=CLUSTER_REFUSED, error_message="not allowed to describe the cluster"
            )
        try:
            wanted = filter_of(filter_fields(req))
        except KafkaError as exc:
            return m.DescribeAclsResponse(error_code=exc.code, error_message=str(exc))
        acls = () if wanted is None else self._security().acls.select(wanted)
        return m.DescribeAclsResponse(error_message=None, resources=described(acls))

    async def create_acls(
        self, req: m.CreateAclsRequest, ctx: RequestContext
    ) -> m.CreateAclsResponse:
        results = [
            m.CreateAclsResponse.AclCreationResult(error_message=None) for _ in req.creations
        ]
        if self._denied(ctx, Operation.ALTER, CLUSTER):
            for result in results:
                result.error_code, result.error_message = CLUSTER_REFUSED, "not allowed to alter"
            return m.CreateAclsResponse(results=results)
        valid: list[tuple[int, Acl]] = []
        for at, creation in enumerate(req.creations):
            try:
                valid.append((at, acl_of(creation)))
            except KafkaError as exc:
                results[at].error_code, results[at].error_message = exc.code, str(exc)
        for start in range(0, len(valid), ACLS_PER_REQUEST_MAX):
            chunk = valid[start : start + ACLS_PER_REQUEST_MAX]
            try:
                await self._to_leader(AclsRequest(AclAction.ADD, tuple(acl for _, acl in chunk)))
            except KafkaError as exc:
                for at, _ in chunk:
                    results[at].error_code, results[at].error_message = exc.code, str(exc)
        return m.CreateAclsResponse(results=results)

    async def delete_acls(
        self, req: m.DeleteAclsRequest, ctx: RequestContext
    ) -> m.DeleteAclsResponse:
        refused = self._denied(ctx, Operation.ALTER, CLUSTER)
        results = []
        for wanted in req.filters:
            result = m.DeleteAclsResponse.DeleteAclsFilterResult(error_message=None)
            try:
                if refused:
                    raise KafkaError(CLUSTER_REFUSED, "not allowed to alter the cluster")
                selected = filter_of(filter_fields(wanted))
                if selected is not None:
                    answer = await self._to_leader(AclsRequest(AclAction.REMOVE, filter=selected))
                    removed = AclsResponse.from_frame(answer).acls
                    result.matching_acls = [deleted(acl) for acl in removed]
            except KafkaError as exc:
                result.error_code, result.error_message = exc.code, str(exc)
            results.append(result)
        return m.DeleteAclsResponse(filter_results=results)

    # -- SCRAM users -----------------------------------------------------------------

    async def describe_users(
        self, req: m.DescribeUserScramCredentialsRequest, ctx: RequestContext
    ) -> m.DescribeUserScramCredentialsResponse:
        if self._denied(ctx, Operation.DESCRIBE, CLUSTER):
            return m.DescribeUserScramCredentialsResponse(
                error_code=CLUSTER_REFUSED, error_message="not allowed to describe the cluster"
            )
        users = self._security().users
        if req.users:
            names = [user.name for user in req.users]
        else:
            names = [info.name for info in users.users()]
        result = m.DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        results = []
        for name in names:
            answer = result(user=name, error_message=None)
            infos = [
                result.CredentialInfo(mechanism=code_of(mechanism), iterations=found.iterations)
                for mechanism in Mechanism
                if (found := users.credential(name, mechanism)) is not None
            ]
            if names.count(name) > 1:
                answer.error_code = Kafka.DUPLICATE_RESOURCE
                answer.error_message = f"user {name[:64]!r} is named more than once"
            elif not infos:
                answer.error_code = Kafka.RESOURCE_NOT_FOUND
                answer.error_message = f"no user named {name[:64]!r}"
            else:
                answer.credential_infos = infos
            results.append(answer)
        return m.DescribeUserScramCredentialsResponse(error_message=None, results=results)

    async def alter_users(
        self, req: m.AlterUserScramCredentialsRequest, ctx: RequestContext
    ) -> m.AlterUserScramCredentialsResponse:
        changes: dict[str, list[Any]] = {}
        asked: list[Any] = [*req.deletions, *req.upsertions]
        for change in asked:
            changes.setdefault(change.name, []).append(change)
        refused = self._denied(ctx, Operation.ALTER, CLUSTER)
        results = []
        for name, mine in changes.items():
            result = m.AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
                user=name, error_message=None
            )
            try:
                if refused:
                    raise KafkaError(CLUSTER_REFUSED, "not allowed to alter the cluster")
                await self._alter_user(name, mine)
            except KafkaError as exc:
                result.error_code, result.error_message = exc.code, str(exc)
            except asyncio.CancelledError:
                raise
            results.append(result)
        return m.AlterUserScramCredentialsResponse(results=results)

    async def _alter_user(self, name: str, asked: list[Any]) -> None:
        """Apply one user's deletions and upsertions (see the module docstring)."""
        mechanisms = [change.mechanism for change in asked]
        if len(set(mechanisms)) != len(mechanisms):
            raise KafkaError(
                Kafka.DUPLICATE_RESOURCE, "a mechanism is named twice for one user in one request"
            )
        upserts: list[ScramCredential] = []
        removed: list[Mechanism] = []
        for change in asked:
            if isinstance(change, m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion):
                upserts.append(upserted_credential(change))
                continue
            mechanism = MECHANISMS.get(change.mechanism)
            if mechanism is None:
                raise KafkaError(
                    Kafka.RESOURCE_NOT_FOUND,
                    f"user {name[:64]!r} has no credential of mechanism code {change.mechanism}",
                )
            removed.append(mechanism)
        await self._to_leader(
            UsersRequest(UserAction.ALTER, name, tuple(upserts), removed=tuple(removed))
        )
