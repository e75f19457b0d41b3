"""A Kafka client's connection to a shard's Kafka port.

The same connection as laminar's own door (`laminar.shards.connection`: the
shard's input budget, answer bounds, idle and slow-frame deadlines, shedding)
with Kafka's framing (`laminar.kafka.framing`) and Kafka's ordering: a Kafka
client matches answers to requests by their order on the connection, so
requests are served one at a time, as a Kafka broker does. A framing error
(a size no client sends, a frame over `--max-frame-bytes`) closes the
connection without an answer: the stream is out of step and Kafka has no
error frame for it. With TLS, the same `TlsStream` as laminar's door
(Kafka's `security.protocol=SSL`). With --auth, the same login gate
(`Connection._login_step`), spoken in SaslHandshake and SaslAuthenticate
(`laminar.kafka.sasl`; Kafka's `security.protocol=SASL_SSL`), or a verified
client certificate.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.kafka import codec
from laminar.kafka.framing import KafkaFrameDecoder
from laminar.kafka.sasl import KafkaSasl
from laminar.security.login import Login
from laminar.security.scram import Refused
from laminar.shards.budget import InputBudget
from laminar.shards.connection import Connection, LoginReply
from laminar.shards.dispatch import Dispatcher
from laminar.shards.handlers import RequestContext
from laminar.shards.kafka_door import KafkaDoor
from laminar.shards.metrics import ShardMetrics
from laminar.wire import ProtocolError
from laminar.wire.codec import Buffer

if TYPE_CHECKING:
    from laminar.shards.fastpath import RequestFastPath

PRODUCE_API_KEY = 0
FETCH_API_KEY = 1
API_VERSIONS_API_KEY = 18
PRODUCE_DECODED_SHARE = 16
"""A produce's records become blobs (a second copy, charged at twice their
size here); the rest of it is small and charged as a header is."""


class KafkaConnection(Connection):
    """One Kafka client's socket (see the module docstring)."""

    max_in_flight = 1

    def __init__(
        self,
        sock: socket.socket,
        door: KafkaDoor,
        dispatcher: Dispatcher,
        metrics: ShardMetrics,
        ctx: RequestContext,
        max_frame_bytes: int,
        on_close: Callable[[Connection], None],
        budget: InputBudget,
        clock: Clock = SYSTEM_CLOCK,
        tls: ssl.SSLContext | None = None,
        login: Login | None = None,
    ) -> None:
        self._door = door
        self._sasl: KafkaSasl | None = None
        super().__init__(
            sock,
            dispatcher,
            metrics,
            ctx,
            max_frame_bytes,
            on_close,
            budget,
            None,
            clock,
            tls,
            login,
        )

    def _new_decoder(self, max_frame_bytes: int) -> KafkaFrameDecoder:
        return KafkaFrameDecoder(max_frame_bytes)

    def _new_fast_path(self) -> RequestFastPath | None:
        return None

    def _fatal_answer(self, exc: ProtocolError) -> list[Buffer] | None:
        return None

    def _login_step(self, login: Login, frame: bytes) -> LoginReply | None:  # type: ignore[override]
        """A frame before the login succeeded: ApiVersions is served as usual,
        SaslHandshake and SaslAuthenticate carry the login (`laminar.kafka.sasl`),
        anything else closes the connection unanswered."""
        if self._sasl is None:
            self._sasl = KafkaSasl(login)
        try:
            request = codec.decode_request(frame)
        except codec.UnsupportedVersion as exc:
            if exc.api_key == API_VERSIONS_API_KEY:
                return None  # the door answers with the versions it serves
            return LoginReply([], login.not_logged_in())
        except codec.MalformedRequest as exc:
            return LoginReply([], login.malformed(str(exc)))
        reply = self._sasl.step(request.body)
        if reply.body is None:
            return None if reply.refused is None else LoginReply([], reply.refused)
        return LoginReply([codec.encode_response(request, reply.body)], reply.refused)

    def _ended(self, frame: bytes, refused: Refused) -> LoginReply:  # type: ignore[override]
        """Once the login has ended (its user was deleted): closed unanswered,
        as Kafka closes a connection whose re-authentication fails."""
        return LoginReply([], refused)

    def _answer_reserve(self, frame: bytes) -> int:  # type: ignore[override]
        """A fetch may answer up to the door's cap: reserve it (one request is in
        flight per connection, so this is one fetch's worth)."""
        api_key = int.from_bytes(frame[:2], "big")
        return self._door.fetch_bytes_max if api_key == FETCH_API_KEY else 0

    @staticmethod
    def _payload_bytes(frame: bytes) -> int:  # type: ignore[override]
        """What `InputBudget.admit` should not charge as decoded objects: a
        Kafka request is decoded whole, so all of it counts as header, except
        most of a produce (its records), which is charged about twice more for
        the blobs it becomes."""
        if int.from_bytes(frame[:2], "big") != PRODUCE_API_KEY:
            return 0
        return len(frame) - len(frame) // PRODUCE_DECODED_SHARE

    async def _serve_one(self, frame: bytes) -> None:  # type: ignore[override]
        answer = await self._door.serve(frame, self._ctx)
        if answer is not None:
            self._send([answer])
