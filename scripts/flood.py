#!/usr/bin/env python3
"""Abusive Kafka clients for scripts/bench-abuse.sh: load a broker the way a hostile or broken
client would, for a fixed time, so that a well-behaved client's latency can be measured beside
it. Sends only to the address given (loopback in the benchmark) and stops by itself.

Modes:
  garbage   connections that each send one to three hostile frames (random bytes, absurd
            lengths, valid headers with random bodies, huge array counts) and close
  idle      N connections that connect and sit idle until the end
  noreader  connections that pipeline Metadata requests without ever reading a response
  loris     connections that announce a 1 MiB frame and send one byte a second

  flood.py MODE HOST:PORT SECONDS [--connections N] [--workers W]
"""

import argparse
import os
import random
import socket
import struct
import sys
import time
from multiprocessing import Process

HUGE = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f"]


def header(api, version, corr=7):
    client = b"flood"
    return struct.pack(">hhih", api, version, corr, len(client)) + client


def hostile_frame(rng):
    kind = rng.randrange(5)
    if kind == 0:
        body = rng.randbytes(rng.randrange(300))
        return struct.pack(">I", len(body)) + body
    if kind == 1:
        return struct.pack(">I", rng.randrange(1 << 24, 1 << 32)) + rng.randbytes(32)
    if kind == 2:
        body = header(rng.randrange(70), rng.randrange(14)) + rng.randbytes(rng.randrange(200))
        return struct.pack(">I", len(body)) + body
    if kind == 3:
        body = header(rng.randrange(70), rng.randrange(14)) + rng.choice(HUGE) * 4
        return struct.pack(">I", len(body)) + body
    return rng.randbytes(rng.randrange(64))


def garbage(addr, until, seed, _n):
    rng = random.Random(seed)
    while time.time() < until:
        try:
            s = socket.create_connection(addr, timeout=1)
            s.sendall(b"".join(hostile_frame(rng) for _ in range(rng.randrange(1, 4))))
            s.close()
        except OSError:
            pass


def idle(addr, until, _seed, n):
    conns = []
    for _ in range(n):
        try:
            conns.append(socket.create_connection(addr, timeout=5))
        except OSError:
            break
    while time.time() < until:
        time.sleep(0.2)
    for c in conns:
        c.close()


def noreader(addr, until, _seed, n):
    # Metadata v1, all topics: an answer for every request, never read.
    body = header(3, 1) + struct.pack(">i", -1)
    frame = struct.pack(">I", len(body)) + body
    while time.time() < until:
        conns = []
        for _ in range(n):
            try:
                s = socket.create_connection(addr, timeout=1)
                s.setblocking(False)
                conns.append(s)
            except OSError:
                pass
        end = min(until, time.time() + 5)
        while time.time() < end:
            for s in conns:
                try:
                    s.send(frame * 64)
                except (BlockingIOError, OSError):
                    pass
            time.sleep(0.01)
        for s in conns:
            s.close()


def announce(addr):
    """A connection that has announced a 1 MiB frame, or None."""
    try:
        s = socket.create_connection(addr, timeout=5)
        s.sendall(struct.pack(">I", 1 << 20))
        return s
    except OSError:
        return None


def loris(addr, until, _seed, n):
    conns = [announce(addr) for _ in range(n)]
    while time.time() < until:
        alive = []
        for s in conns:
            try:
                s.send(b"\0")
                alive.append(s)
            except (OSError, AttributeError):
                # Cut off (or never connected): come back as a new slow sender.
                alive.append(announce(addr))
        conns = alive
        time.sleep(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["garbage", "idle", "noreader", "loris"])
    p.add_argument("addr")
    p.add_argument("seconds", type=float)
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        sys.exit("flood.py only targets loopback addresses")
    addr = (host, int(port))
    until = time.time() + a.seconds
    fn = {"garbage": garbage, "idle": idle, "noreader": noreader, "loris": loris}[a.mode]
    per = max(1, a.connections // a.workers)
    procs = [Process(target=fn, args=(addr, until, os.getpid() * 31 + w, per)) for w in range(a.workers)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()


if __name__ == "__main__":
    main()
