"""The records of one produce operation, derived from its ``content`` parameters alone (their
``rng`` seeds a private ``random.Random``), so a history replays the same bytes: keyed and null
keys, null and empty values, headers (empty and null header values included) and, on some plain
topics, explicit timestamps in the past."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp: int  # 0: the producer's clock


def records(content: dict, count: int, partitions: list[int], tag: str) -> list[Record]:
    """``count`` records spread over ``partitions``; ``tag`` (op index) makes values unique."""
    rng = random.Random(content["rng"])
    base_ts = int(time.time() * 1000)
    out = []
    for i in range(count):
        partition = partitions[i % len(partitions)] if len(partitions) > 1 and rng.random() < 0.5 else rng.choice(partitions)
        key = None if rng.random() < content["null_keys"] else f"k{rng.randrange(content['key_space'])}".encode()
        if rng.random() < content["null_values"]:
            value = None
        else:
            size = rng.randint(0, content["value_size"])
            value = f"{tag}/{i}:".encode() + rng.randbytes(size)
        headers = None
        if rng.random() < content["headers"]:
            headers = [(f"h{j}", rng.choice([b"", None, f"v{i}-{j}".encode(), rng.randbytes(8)])) for j in range(rng.randint(1, 3))]
        # Explicit older timestamps, in any order within a batch (Kafka accepts that).
        timestamp = base_ts - rng.randrange(1, 86_400_000) if content["past_timestamps"] and rng.random() < 0.5 else 0
        out.append(Record(partition, key, value, headers, timestamp))
    return out
