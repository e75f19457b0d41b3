"""The laminar client: sync (`Client`) and asyncio (`AsyncClient`), shard-direct.

    from laminar.client import Client
    with Client("127.0.0.1:7070") as c:
        c.create_topic("events", partitions=8)
        first = c.produce("events", partition=3, values=[b"a", b"b"])
        records = c.fetch("events", partition=3, index=first)
        lowest, highest = c.offsets("events", partition=3)

Both clients fetch the node's metadata, compute each partition's owning shard
with `laminar.placement.shard_for`, keep one connection per shard and pipeline
requests on it. Modules: `core` (every operation as a sans-I/O plan, which
both clients perform), `routing` (addresses, the cluster view), `protocol`
(sans-IO correlation matching), `calls` (requests as data), `writes` (atomic
writes), `retry` (what may
be sent again), `results`, `batch` (`RecordBatch`, a fetch answer without an
object per record), `reader` (`PartitionReader`, a partition read in order
one fetch ahead), `arrow` (fetch answers to Arrow) and `errors` (what callers get), `login`
(a connection's SCRAM login), `security` (users and ACLs), `blocking` and
`sync` (the sync client), `aio_connection` and `aio` (the asyncio client).
"""

from laminar.client.aio import AsyncClient
from laminar.client.batch import RecordBatch
from laminar.client.consumer import AsyncConsumer, CommitFailedError, ConsumedRecord, Consumer
from laminar.client.errors import (
    AuthenticationFailedError,
    CannotConnectError,
    CommitPendingError,
    ConnectionLostError,
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidRequestError,
    LaminarError,
    LimitReachedError,
    NotAuthorizedError,
    NotEnoughReplicasError,
    NotLeaderError,
    NotOwnerError,
    NotReadyError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    OutOfOrderSequenceError,
    ProtocolViolationError,
    RecordTooLargeError,
    RequestTimeoutError,
    ServerError,
    ServerTimeoutError,
    ShuttingDownError,
    StagedDataMissingError,
    StagedDataUnreachableError,
    StageOutOfOrderError,
    StagingFullError,
    StorageError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
    UnknownUserError,
    UserExistsError,
    WriteAbortedError,
    WriteCommittedError,
)
from laminar.client.groups import GroupDescription, GroupRequestError, PartitionLag
from laminar.client.producer import Produced
from laminar.client.reader import PartitionReader
from laminar.client.results import (
    Offsets,
    PartitionDescription,
    PingResult,
    Record,
    Sent,
    TopicDescription,
)
from laminar.client.retry import RetryPolicy
from laminar.client.routing import ClusterView, parse_address, partition_for_key
from laminar.client.sync import Client, Pending
from laminar.client.writes import (
    AsyncAtomicWrite,
    AsyncStager,
    AtomicWrite,
    CommitResult,
    Stager,
    new_write_id,
)
from laminar.security.acls import (
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from laminar.security.credentials import UserInfo
from laminar.wire import MetadataResponse, ShardInfo, TopicInfo

__all__ = [
    "Acl",
    "AclFilter",
    "AsyncAtomicWrite",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncStager",
    "AtomicWrite",
    "AuthenticationFailedError",
    "CannotConnectError",
    "Client",
    "ClusterView",
    "CommitFailedError",
    "CommitPendingError",
    "CommitResult",
    "ConnectionLostError",
    "ConsumedRecord",
    "Consumer",
    "CorruptRecordError",
    "DuplicateSequenceError",
    "GroupDescription",
    "GroupRequestError",
    "InvalidRequestError",
    "LaminarError",
    "LimitReachedError",
    "MetadataResponse",
    "NotAuthorizedError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "NotOwnerError",
    "NotReadyError",
    "OffsetOutOfRangeError",
    "Offsets",
    "Operation",
    "OutOfOrderSequenceError",
    "OutcomeUnknownError",
    "PartitionDescription",
    "PartitionLag",
    "PartitionReader",
    "PatternType",
    "Pending",
    "Permission",
    "PingResult",
    "Produced",
    "ProtocolViolationError",
    "Record",
    "RecordBatch",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "ResourceType",
    "RetryPolicy",
    "Sent",
    "ServerError",
    "ServerTimeoutError",
    "ShardInfo",
    "ShuttingDownError",
    "StageOutOfOrderError",
    "StagedDataMissingError",
    "StagedDataUnreachableError",
    "Stager",
    "StagingFullError",
    "StorageError",
    "TopicDescription",
    "TopicExistsError",
    "TopicInfo",
    "UnknownPartitionError",
    "UnknownTopicError",
    "UnknownUserError",
    "UserExistsError",
    "UserInfo",
    "WriteAbortedError",
    "WriteCommittedError",
    "new_write_id",
    "parse_address",
    "partition_for_key",
]
