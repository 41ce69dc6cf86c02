#!/usr/bin/env python3
"""Transactional producer throughput and commit latency against a running broker.

    scripts/bench-txn.py [--bootstrap 127.0.0.1:9092] [--records 200000] [--value-bytes 100]

For transactions of 1, 100 and 10,000 records over 1 and 10 partitions it reports records/s
and the commit_transaction() latency (p50, p99: the EndTxn round, markers included), next to
the same records produced by an idempotent producer without transactions. Uses
confluent-kafka (librdkafka); run it with the test venv's python.
"""

import argparse
import statistics
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def topic(admin, partitions):
    name = f"bench-txn-{partitions}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(bootstrap, name, partitions, records, per_txn, value, transactional):
    cfg = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
           "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000}
    if transactional:
        cfg["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(cfg)
    if transactional:
        p.init_transactions(30)
    commits = []
    start = time.perf_counter()
    sent = 0
    while sent < records:
        if transactional:
            p.begin_transaction()
        n = min(per_txn, records - sent)
        for i in range(n):
            while True:
                try:
                    p.produce(name, value, partition=(sent + i) % partitions)
                    break
                except BufferError:
                    p.poll(0.01)
        sent += n
        if transactional:
            t = time.perf_counter()
            p.commit_transaction(30)
            commits.append(time.perf_counter() - t)
    p.flush(60)
    elapsed = time.perf_counter() - start
    return records / elapsed, commits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    a = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    value = b"x" * a.value_bytes
    for partitions in (1, 10):
        name = topic(admin, partitions)
        # The first run on a new topic pays for its metadata and connections: warm up.
        run(a.bootstrap, name, partitions, min(a.records, 10_000), a.records, value, False)
        base, _ = run(a.bootstrap, name, partitions, a.records, a.records, value, False)
        print(f"partitions={partitions} txn_records=none records_per_s={base:.0f}")
        for per_txn in (1, 100, 10_000):
            records = min(a.records, per_txn * 2000)
            rate, commits = run(a.bootstrap, name, partitions, records, per_txn, value, True)
            print(
                f"partitions={partitions} txn_records={per_txn} records_per_s={rate:.0f} "
                f"vs_plain={rate / base:.2f} txns={len(commits)} "
                f"commit_p50_ms={pct(commits, 0.5) * 1000:.2f} "
                f"commit_p99_ms={pct(commits, 0.99) * 1000:.2f} "
                f"commit_mean_ms={statistics.mean(commits) * 1000:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
