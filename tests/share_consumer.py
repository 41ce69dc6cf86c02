"""A share consumer (KIP-932) driven by the integration tests, on confluent-kafka's
ShareConsumer (librdkafka's share consumer).

It subscribes to the topics named, polls until it has seen `--count` records, or until
`--idle` seconds pass without one, or until `--seconds` have passed in all, or until the file
`--stop-file` names exists, and prints one JSON
line per record it was given: {"p": partition, "o": offset, "d": delivery count, "v": value}.
`--ack` says what it does with each record:

- accept: acknowledges every record (implicit acknowledgement: the next poll accepts);
- explicit: acknowledges each record explicitly (ACCEPT), except that a value listed in
  `--reject` (or starting with `--reject-prefix`) is REJECTed and one in `--release`
  RELEASEd (to be delivered again);
- hold: acknowledges nothing and, after the first poll that returns records, exits at once
  without closing (as a member killed with its locks held would).

Exit status 0; a client error is printed as {"error": ...} and ends the run with status 1.
"""

import argparse
import json
import os
import sys
import time

from confluent_kafka import AcknowledgeType, ShareConsumer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", action="append", required=True)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--stop-file", default=None)
    ap.add_argument("--debug", default=None, help="librdkafka debug contexts, to stderr")
    ap.add_argument("--ack", choices=["accept", "explicit", "hold"], default="accept")
    ap.add_argument("--reject", action="append", default=[])
    ap.add_argument("--reject-prefix", default=None)
    ap.add_argument("--release", action="append", default=[])
    args = ap.parse_args()

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "share.acknowledgement.mode": "implicit" if args.ack == "accept" else "explicit",
    }
    if args.debug:
        conf["debug"] = args.debug
    consumer = ShareConsumer(conf)
    consumer.subscribe(args.topic)
    seen = 0
    start = time.monotonic()
    last = start
    try:
        while True:
            now = time.monotonic()
            if args.count and seen >= args.count:
                break
            if now - last > args.idle or now - start > args.seconds:
                break
            if args.stop_file and os.path.exists(args.stop_file):
                break
            batch = consumer.poll(1.0)
            for m in batch:
                if m.error():
                    print(json.dumps({"error": str(m.error())}), flush=True)
                    return 1
                value = (m.value() or b"").decode("utf-8", "replace")
                print(
                    json.dumps(
                        {"p": m.partition(), "o": m.offset(), "d": m.delivery_count(), "v": value}
                    ),
                    flush=True,
                )
                seen += 1
                last = time.monotonic()
                if args.ack == "explicit":
                    rejected = value in args.reject or (
                        args.reject_prefix is not None and value.startswith(args.reject_prefix)
                    )
                    if rejected:
                        consumer.acknowledge(m, AcknowledgeType.REJECT)
                    elif value in args.release:
                        consumer.acknowledge(m, AcknowledgeType.RELEASE)
                    else:
                        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            if args.ack == "explicit":
                consumer.commit_sync()
            if args.ack == "hold" and len(batch) > 0:
                break
        if args.ack == "hold":
            # Gone without a word: the broker learns of it only by the locks expiring.
            sys.stdout.flush()
            os._exit(0)
        if args.ack == "accept":
            consumer.commit_sync()
    finally:
        if args.ack != "hold":
            consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
