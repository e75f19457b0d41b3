"""Cost of the generated Kafka codec next to kafka-python 3's protocol module
(issue 27: the codec is generated, a maintained library is the test oracle;
this is the measurement behind that choice).

    .venv/bin/python benchmarks/kafka_codec_bench.py [--alternations 15]

Three messages, at the highest version laminar serves: a ProduceRequest v9
with one partition (a 1 KiB records blob), a FetchResponse v12 with one
partition and a 64 KiB records blob, a MetadataResponse v11 with 10 topics x
4 partitions. For each, microseconds per encode and per decode, ours and
kafka-python's, alternated in one run (the best of `--alternations` timings
of each, which a neighbour's load on a shared machine moves least), plus
ours through the codec's framing (`decode_request`, `encode_response`) where
that applies. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
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


def measure(message: Any, version: int, key: int, alternations: int) -> dict[str, float]:
    """Best microseconds per call of each variant, the variants alternated
    `alternations` times so that a neighbour's load hits them alike."""
    cls = type(message)
    name = cls.__name__
    out = bytearray()
    m.encode(message, version, out)
    data = bytes(out)
    view = memoryview(data)
    theirs_cls = kp_class(name)
    theirs = to_kp(message, SCHEMAS[name].root, theirs_cls, version)
    variants: dict[str, Callable[[], object]] = {
        "ours encode": lambda: m.encode(message, version, bytearray()),
        "ours decode": lambda: m.decode(cls, version, view),
        "kafka-python encode": theirs.encode,
        "kafka-python decode": lambda: theirs_cls.decode(data, version=version),
    }
    if name.endswith("Request"):
        header = bytearray()
        m.encode(
            m.RequestHeader(request_api_key=key, request_api_version=version, client_id="c"),
            2,
            header,
        )
        frame = bytes(header) + data
        variants["ours framed"] = lambda: codec.decode_request(frame)
    else:
        request = codec.Request(key, version, 1, "c", m.REQUESTS[key]())
        variants["ours framed"] = lambda: codec.encode_response(request, message)
    number = max(20, int(20000 / (1 + len(data) // 1024 + 20 * ("Metadata" in name))))
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(alternations):
        for label, fn in variants.items():
            best[label] = min(best[label], timeit.timeit(fn, number=number) / number * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alternations", type=int, default=15)
    args = parser.parse_args()
    columns = ["ours encode", "ours decode", "kafka-python encode", "kafka-python decode"]
    print("| message | " + " | ".join(columns) + " | ours framed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, message, version, key in CASES:
        best = measure(message, version, key, args.alternations)
        cells = " | ".join(f"{best[c]:.1f}" for c in [*columns, "ours framed"])
        print(f"| {label} | {cells} |")


if __name__ == "__main__":
    main()
