#!/usr/bin/env python3
"""Share-group latencies against a running broker, with librdkafka (confluent-kafka):

- produce -> acknowledged: a producer writes --rate records/s for --seconds (each stamped
  with its send time in the record timestamp); one ShareConsumer in explicit mode accepts
  every record it is given and commits (ShareAcknowledge, answered once the share state is
  durable); for each record, commit return time - send time. Prints p50/p99/max.
- redelivery after a member dies: a member acquires records and exits without a word
  (os._exit, as a SIGKILL would); a second member, already polling, gets them once their
  locks expire. Prints the time from the death to the first record the second member gets
  again, next to the group's lock duration (--lock-ms, set as share.record.lock.duration.ms).

    target/release/strata serve --data-dir /tmp/bench-share &
    ~/.cache/strata-venv/bin/python scripts/bench-share-latency.py --rate 2000 --seconds 30
"""
import argparse
import json
import multiprocessing
import os
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from importlib.util import module_from_spec, spec_from_file_location

_spec = spec_from_file_location(
    "bench_share", os.path.join(os.path.dirname(__file__), "bench-share.py")
)
bench_share = module_from_spec(_spec)
_spec.loader.exec_module(bench_share)


def now_ms():
    return time.time() * 1000.0


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def producer_proc(bootstrap, topic, rate, seconds):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            p.produce(topic, b"x" * 256, timestamp=int(now_ms()))
            sent += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush()


def produce_to_ack(args, topic):
    group = f"lat-{topic}"
    bench_share.set_group_config(args.bootstrap, group, "share.auto.offset.reset", "earliest")
    c = ShareConsumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
    })
    c.subscribe([topic])
    prod = multiprocessing.Process(
        target=producer_proc, args=(args.bootstrap, topic, args.rate, args.seconds)
    )
    prod.start()
    latencies = []
    want = args.rate * args.seconds
    deadline = time.monotonic() + args.seconds + 60
    while len(latencies) < want and time.monotonic() < deadline:
        batch = [m for m in c.poll(0.5) if not m.error()]
        for m in batch:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if batch:
            c.commit_sync()
            done = now_ms()
            latencies.extend(done - m.timestamp()[1] for m in batch)
    prod.join()
    c.close()
    return {
        "records": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1),
    }


def dying_member(bootstrap, group, topic, ready):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    while True:
        if [m for m in c.poll(0.5) if not m.error()]:
            ready.put(now_ms())
            # Flushed before the exit, which skips everything a clean one would do.
            ready.close()
            ready.join_thread()
            os._exit(0)


def redelivery(args, topic):
    group = f"redeliver-{topic}"
    bench_share.set_group_config(args.bootstrap, group, "share.auto.offset.reset", "earliest")
    bench_share.set_group_config(
        args.bootstrap, group, "share.record.lock.duration.ms", str(args.lock_ms)
    )
    p = Producer({"bootstrap.servers": args.bootstrap})
    for _ in range(100):
        p.produce(topic, b"y")
    p.flush()
    q = multiprocessing.Queue()
    d = multiprocessing.Process(target=dying_member, args=(args.bootstrap, group, topic, q))
    d.start()
    died = q.get()
    d.join()
    c = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": group})
    c.subscribe([topic])
    deadline = time.monotonic() + args.lock_ms / 1000 + 60
    again = None
    while again is None and time.monotonic() < deadline:
        got = [m for m in c.poll(0.2) if not m.error() and m.delivery_count() >= 2]
        if got:
            again = now_ms()
    c.close()
    return {"lock_ms": args.lock_ms,
            "death_to_redelivery_ms": None if again is None else round(again - died)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--lock-ms", type=int, default=15000)
    args = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    stamp = int(time.time())
    t1, t2 = f"lat-{stamp}", f"redeliver-{stamp}"
    for f in admin.create_topics([NewTopic(t1, 1, 1), NewTopic(t2, 1, 1)]).values():
        f.result()
    print(json.dumps({"produce_to_ack": produce_to_ack(args, t1)}))
    print(json.dumps({"redelivery": redelivery(args, t2)}))


if __name__ == "__main__":
    main()
