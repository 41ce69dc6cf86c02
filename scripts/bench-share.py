#!/usr/bin/env python3
"""Share groups against classic groups on the same data: consumer throughput and broker CPU
per GB consumed, with librdkafka (confluent-kafka) as the client of both, each group of
--members members (the classic group's beyond the partition count idle, as Kafka's are).

Against a running broker (--pid for its CPU from /proc): creates a topic of --partitions,
produces --records records of --size bytes, then reads all of them once with a classic
consumer group (auto commit) and once with a share group of --members ShareConsumers
(implicit acknowledgement, group config share.auto.offset.reset=earliest), each in its own
process, and prints per run the wall time, MB/s and broker CPU seconds per GB. The share
run also reports the share-state writes the broker made (strata_share_state_writes_total from
--admin) per acknowledged record.

    target/release/strata serve --data-dir /tmp/bench-share &
    ~/.cache/strata-venv/bin/python scripts/bench-share.py --pid $(pgrep -f 'strata serve') \
        --partitions 1 --members 1

Python is the client here, so MB/s is bounded by it; broker CPU per GB is the comparison.
"""
import argparse
import json
import multiprocessing
import os
import socket
import struct
import time
import urllib.request

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def metric(admin, name):
    body = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def set_group_config(bootstrap, group, name, value):
    """IncrementalAlterConfigs v0 of GROUP resource 32 (hand-written: librdkafka's admin API
    names ACL resource types, and its GROUP is not the config resource)."""
    def s(v):
        b = v.encode()
        return struct.pack(">h", len(b)) + b
    body = (struct.pack(">i", 1) + struct.pack(">b", 32) + s(group)
            + struct.pack(">i", 1) + s(name) + struct.pack(">b", 0) + s(value)
            + struct.pack(">b", 0))
    header = struct.pack(">hhi", 44, 0, 1) + s("bench-share")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as c:
        msg = header + body
        c.sendall(struct.pack(">i", len(msg)) + msg)
        size = struct.unpack(">i", c.recv(4, socket.MSG_WAITALL))[0]
        resp = c.recv(size, socket.MSG_WAITALL)
    # correlation id, throttle ms, one resource: its error code.
    (count,) = struct.unpack(">i", resp[8:12])
    (code,) = struct.unpack(">h", resp[12:14])
    if count != 1 or code != 0:
        raise SystemExit(f"setting {name} on group {group}: error {code}")


def share_reader(bootstrap, topic, group, stop, out):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    n = 0
    while not stop.is_set():
        batch = c.poll(0.5)
        n += sum(1 for m in batch if not m.error())
        out.put(("seen", len(batch)))
    c.commit_sync()
    c.close()
    out.put(("done", n))


def classic_member(bootstrap, topic, group, stop, out):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
    })
    c.subscribe([topic])
    n = 0
    while not stop.is_set():
        got = [m for m in c.consume(1000, 0.5) if not m.error()]
        n += len(got)
        out.put(("seen", len(got)))
    c.close()
    out.put(("done", n))


def run_members(args, target, group):
    """--members processes of `target` reading the topic until --records are seen: (records
    read, seconds, broker CPU seconds)."""
    q = multiprocessing.Queue()
    stop = multiprocessing.Event()
    before = cpu_seconds(args.pid)
    start = time.monotonic()
    procs = [
        multiprocessing.Process(target=target, args=(args.bootstrap, args.topic, group, stop, q))
        for _ in range(args.members)
    ]
    for p in procs:
        p.start()
    seen = 0
    deadline = time.monotonic() + 600
    while seen < args.records and time.monotonic() < deadline:
        kind, n = q.get()
        if kind == "seen":
            seen += n
    elapsed = time.monotonic() - start
    stop.set()
    done = 0
    for _ in procs:
        while True:
            kind, n = q.get()
            if kind == "done":
                done += n
                break
    for p in procs:
        p.join()
    return done, elapsed, cpu_seconds(args.pid) - before


def run_classic(args, topic):
    """A classic group of --members consumers."""
    return run_members(args, classic_member, f"classic-{topic}")


def run_share(args, topic):
    group = f"share-{topic}"
    set_group_config(args.bootstrap, group, "share.auto.offset.reset", "earliest")
    writes_before = metric(args.admin, "strata_share_state_writes_total")
    done, elapsed, cpu = run_members(args, share_reader, group)
    writes = metric(args.admin, "strata_share_state_writes_total") - writes_before
    return done, elapsed, cpu, writes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--admin", default="127.0.0.1:9644")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--members", type=int, default=1)
    args = ap.parse_args()

    topic = f"bench-share-{int(time.time())}-{args.partitions}"
    args.topic = topic
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result()
    prod = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"x" * args.size
    for i in range(args.records):
        while True:
            try:
                prod.produce(topic, value, partition=i % args.partitions)
                break
            except BufferError:
                prod.poll(0.1)
    prod.flush()
    gb = args.records * args.size / 1e9

    n, secs, cpu = run_classic(args, topic)
    rows = [{"group": f"classic x{args.members}", "records": n, "s": round(secs, 2),
             "MB/s": round(n * args.size / 1e6 / secs, 1), "cpu_s_per_GB": round(cpu / gb, 2)}]
    n, secs, cpu, writes = run_share(args, topic)
    rows.append({"group": f"share x{args.members}", "records": n, "s": round(secs, 2),
                 "MB/s": round(n * args.size / 1e6 / secs, 1), "cpu_s_per_GB": round(cpu / gb, 2),
                 "state_writes": int(writes),
                 "records_per_write": round(n / writes, 1) if writes else None})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
