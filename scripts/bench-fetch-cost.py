#!/usr/bin/env python3
"""Broker CPU per request of what a librdkafka consumer of many partitions sends, measured
without librdkafka (whose consumer of 10,000 partitions stalls now and then on this VM, so
`strata perf consume` varies 2x from run to run; see docs/benchmarks.md).

Three probes against one topic on a running broker (plain TCP, hand-written frames):
  empty  - sessionless Fetch v4 naming every partition at its high watermark (nothing new:
           what an idle consumer's every fetch costs)
  data   - the same from offset 0 with max_bytes 16 MiB, 1 MiB per partition (a consumer
           reading from the beginning: the response fills from the first partitions)
  offsets- one ListOffsets (earliest) per partition, 16 in flight, as librdkafka resolves a
           new group's starting offsets: one request per partition
  commit - OffsetCommit v7 of every partition's offset for a simple group (what auto-commit
           sends every 5 s)
  fetch-offsets - OffsetFetch v5 of every partition (a member's start after a join)
  metadata - Metadata v8 of the topic (every partition's leader, replicas, ISR)

Broker CPU is utime+stime of --pid from /proc over the timed requests.

    scripts/bench-fetch-cost.py --pid $(pgrep -f 'strata serve') --topic scale --partitions 10000
"""
import argparse
import os
import socket
import struct
import time


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.corr = 0

    def send(self, api, version, body):
        self.corr += 1
        cid = b"bench-fetch-cost"
        msg = struct.pack(">hhih", api, version, self.corr, len(cid)) + cid + body
        self.s.sendall(struct.pack(">i", len(msg)) + msg)

    def recv(self):
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack_from(">i", self.buf)[0]
                if len(self.buf) >= 4 + n:
                    frame = bytes(self.buf[4 : 4 + n])
                    del self.buf[: 4 + n]
                    return frame
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise SystemExit("the broker closed the connection")
            self.buf += chunk

    def rpc(self, api, version, body):
        self.send(api, version, body)
        return self.recv()


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def topic_header(topic):
    t = topic.encode()
    return struct.pack(">h", len(t)) + t


def list_offsets_body(topic, partitions, timestamp):
    return (
        struct.pack(">ii", -1, 1)
        + topic_header(topic)
        + struct.pack(">i", len(partitions))
        + b"".join(struct.pack(">iq", p, timestamp) for p in partitions)
    )


def high_watermarks(conn, topic, partitions):
    r = conn.rpc(2, 1, list_offsets_body(topic, range(partitions), -1))
    at = 4 + 4  # correlation id, topic count
    at += 2 + struct.unpack_from(">h", r, at)[0]
    count = struct.unpack_from(">i", r, at)[0]
    at += 4
    out = {}
    for _ in range(count):
        p, err, _ts, offset = struct.unpack_from(">ihqq", r, at)
        at += 22
        if err:
            raise SystemExit(f"ListOffsets {topic}-{p}: error {err}")
        out[p] = offset
    return out


def fetch_body(topic, offsets):
    return (
        struct.pack(">iiiib", -1, 0, 0, 16 << 20, 0)  # replica, max_wait, min_bytes, max_bytes, isolation
        + struct.pack(">i", 1)
        + topic_header(topic)
        + struct.pack(">i", len(offsets))
        + b"".join(struct.pack(">iqi", p, o, 1 << 20) for p, o in sorted(offsets.items()))
    )


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def offset_commit_body(group, topic, offsets):
    return (
        string(group)
        + struct.pack(">i", -1)  # generation: a simple (standalone) commit
        + string("")  # member id
        + struct.pack(">h", -1)  # group instance id: null
        + struct.pack(">i", 1)
        + topic_header(topic)
        + struct.pack(">i", len(offsets))
        + b"".join(struct.pack(">iqih", p, o, -1, -1) for p, o in sorted(offsets.items()))
    )


def offset_fetch_body(group, topic, partitions):
    return (
        string(group)
        + struct.pack(">i", 1)
        + topic_header(topic)
        + struct.pack(">i", len(partitions))
        + b"".join(struct.pack(">i", p) for p in partitions)
    )


def metadata_body(topic):
    return struct.pack(">i", 1) + topic_header(topic) + struct.pack(">bbb", 0, 0, 0)


def error_code_at(response, at):
    return struct.unpack_from(">h", response, at)[0]


def timed(pid, n, work):
    hz = os.sysconf("SC_CLK_TCK")
    c0, t0 = cpu_ticks(pid), time.time()
    size = work()
    c1, t1 = cpu_ticks(pid), time.time()
    return (c1 - c0) / hz / n * 1e6, (t1 - t0) / n * 1e6, size


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--broker", default="127.0.0.1:9092")
    a.add_argument("--pid", type=int, required=True, help="the broker's process id")
    a.add_argument("--topic", required=True)
    a.add_argument("--partitions", type=int, required=True)
    a.add_argument("--fetches", type=int, default=200)
    a.add_argument("--depth", type=int, default=16, help="ListOffsets requests in flight")
    args = a.parse_args()
    conn = Conn(args.broker)
    hw = high_watermarks(conn, args.topic, args.partitions)
    for name, offsets in [("empty", hw), ("data", {p: 0 for p in hw})]:
        body = fetch_body(args.topic, offsets)
        for _ in range(3):
            conn.rpc(1, 4, body)

        def fetches():
            return sum(len(conn.rpc(1, 4, body)) for _ in range(args.fetches))

        cpu_us, wall_us, size = timed(args.pid, args.fetches, fetches)
        print(
            f"{name:7} fetches={args.fetches} partitions={args.partitions} "
            f"response_bytes={size // args.fetches} broker_cpu_ms_per_fetch={cpu_us / 1000:.2f} "
            f"broker_cpu_s_per_gb={cpu_us / 1e6 / (size / args.fetches) * 1e9:.2f} "
            f"wall_ms_per_fetch={wall_us / 1000:.2f}"
        )

    def offsets():
        inflight = 0
        for p in range(args.partitions):
            conn.send(2, 1, list_offsets_body(args.topic, [p], -2))
            inflight += 1
            if inflight >= args.depth:
                conn.recv()
                inflight -= 1
        for _ in range(inflight):
            conn.recv()
        return 0

    cpu_us, wall_us, _ = timed(args.pid, args.partitions, offsets)
    print(
        f"offsets requests={args.partitions} depth={args.depth} "
        f"broker_cpu_us_per_request={cpu_us:.1f} wall_us_per_request={wall_us:.1f}"
    )

    group = f"bench-fetch-cost-{os.getpid()}"
    probes = [
        ("commit", 8, 7, offset_commit_body(group, args.topic, hw)),
        ("fetch-offsets", 9, 5, offset_fetch_body(group, args.topic, range(args.partitions))),
        ("metadata", 3, 8, metadata_body(args.topic)),
    ]
    rounds = 20
    for name, api, version, body in probes:
        first = conn.rpc(api, version, body)
        if name == "commit":
            # correlation id, throttle, topic count, name, partition count, first partition
            at = 4 + 4 + 4 + 2 + len(args.topic) + 4 + 4
            if error_code_at(first, at):
                raise SystemExit(f"OffsetCommit: error {error_code_at(first, at)}")

        def requests():
            return sum(len(conn.rpc(api, version, body)) for _ in range(rounds))

        cpu_us, wall_us, size = timed(args.pid, rounds, requests)
        print(
            f"{name:13} requests={rounds} partitions={args.partitions} "
            f"response_bytes={size // rounds} broker_cpu_ms_per_request={cpu_us / 1000:.2f} "
            f"broker_cpu_us_per_partition={cpu_us / args.partitions:.2f} "
            f"wall_ms_per_request={wall_us / 1000:.2f}"
        )


if __name__ == "__main__":
    main()
