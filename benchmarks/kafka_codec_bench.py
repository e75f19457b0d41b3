"""Cost of the generated Kafka codec next to kafka-python 3's protocol module
(issue 27: the codec is generated, a maintained library is the test oracle;
this is the measurement behind that choice).

    .venv/bin/python benchmarks/kafka_codec_bench.py [--rounds 5]

Three messages, at the highest version laminar serves: a ProduceRequest v9
with one partition (a 1 KiB records blob), a FetchResponse v12 with one
partition and a 64 KiB records blob, a MetadataResponse v11 with 10 topics x
4 partitions. For each, microseconds per encode and per decode, ours and
kafka-python's, interleaved in one run (medians over rounds; each round the
best of 5 timeit repeats), plus ours through the codec's framing
(`decode_request`, `encode_response`) where that applies. Prints a Markdown
table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from laminar.kafka import codec  # noqa: E402
from laminar.kafka import messages as m  # noqa: E402
from tests.kafka.oracle import SCHEMAS, kp_class, to_kp  # noqa: E402


def produce() -> m.ProduceRequest:
    data = m.ProduceRequest.TopicProduceData
    part = data.PartitionProduceData(index=0, records=b"r" * 1024)
    return m.ProduceRequest(
        acks=-1, timeout_ms=30000, topic_data=[data(name="events", partition_data=[part])]
    )


def fetch() -> m.FetchResponse:
    topic = m.FetchResponse.FetchableTopicResponse
    part = topic.PartitionData(partition_index=0, high_watermark=1000, records=b"f" * 65536)
    return m.FetchResponse(responses=[topic(topic="events", partitions=[part])])


def metadata() -> m.MetadataResponse:
    t = m.MetadataResponse.MetadataResponseTopic
    brokers = [
        m.MetadataResponse.MetadataResponseBroker(node_id=i, host="127.0.0.1", port=9092 + i)
        for i in range(3)
    ]
    topics = [
        t(
            name=f"topic-{i}",
            partitions=[
                t.MetadataResponsePartition(
                    partition_index=p, leader_id=p % 3, replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2]
                )
                for p in range(4)
            ],
        )
        for i in range(10)
    ]
    return m.MetadataResponse(brokers=brokers, cluster_id="laminar", controller_id=0, topics=topics)


CASES: list[tuple[str, Any, int, int]] = [  # label, message, version, api key
    ("ProduceRequest v9, 1 partition, 1 KiB", produce(), 9, 0),
    ("FetchResponse v12, 1 partition, 64 KiB", fetch(), 12, 1),
    ("MetadataResponse v11, 10 topics x 4 partitions", metadata(), 11, 3),
]


def best_us(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def measure(message: Any, version: int, key: int) -> dict[str, float]:
    cls = type(message)
    name = cls.__name__
    out = bytearray()
    m.encode(message, version, out)
    data = bytes(out)
    theirs_cls = kp_class(name)
    theirs = to_kp(message, SCHEMAS[name].root, theirs_cls, version)
    number = 2000
    row = {
        "ours encode": best_us(lambda: m.encode(message, version, bytearray()), number),
        "ours decode": best_us(lambda: m.decode(cls, version, memoryview(data)), number),
        "kafka-python encode": best_us(theirs.encode, number),
        "kafka-python decode": best_us(lambda: theirs_cls.decode(data, version=version), number),
    }
    if name.endswith("Request"):
        header = bytearray()
        m.encode(
            m.RequestHeader(
                request_api_key=key, request_api_version=version, correlation_id=1, client_id="c"
            ),
            2,
            header,
        )
        frame = bytes(header) + data
        row["ours decode_request"] = best_us(lambda: codec.decode_request(frame), number)
    else:
        request = codec.Request(key, version, 1, "c", m.REQUESTS[key]())
        row["ours encode_response"] = best_us(
            lambda: codec.encode_response(request, message), number
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label, *_ in CASES}
    for _ in range(args.rounds):
        for label, message, version, key in CASES:
            rounds[label].append(measure(message, version, key))
    columns = ["ours encode", "ours decode", "kafka-python encode", "kafka-python decode"]
    print("| message | " + " | ".join(columns) + " | ours framed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, rows in rounds.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        framed = med.get("ours decode_request", med.get("ours encode_response", 0.0))
        print(
            f"| {label} | {med['ours encode']:.1f} | {med['ours decode']:.1f} | "
            f"{med['kafka-python encode']:.1f} | {med['kafka-python decode']:.1f} | {framed:.1f} |"
        )


if __name__ == "__main__":
    main()
