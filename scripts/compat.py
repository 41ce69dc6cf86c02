#!/usr/bin/env python3
"""Compatibility checks of a fresh `strata serve` against real Kafka clients.

Clients: confluent-kafka (librdkafka), kafka-python (an independent pure-Python codec) and the
kcat CLI. Each named step creates topics, produces, consumes, lists offsets or describes
configs, and compares what it reads back with what it wrote. The script starts its own broker
on free ports (it parses the READY line), prints one PASS/FAIL line per step, then
`N passed, M failed`, and exits non-zero if any step failed.

Usage: compat.py [--bin PATH/TO/strata] [--keep]
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def default_bin():
    if os.environ.get("STRATA_BIN"):
        return os.environ["STRATA_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    return os.path.join(target, "debug", "strata")


class Broker:
    """A `strata serve` child process on free ports with a temporary data dir."""

    def __init__(self, binary, workdir, extra_env=None):
        self.data_dir = os.path.join(workdir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(workdir, "strata.log")
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("STRATA_NUM_PARTITIONS", "1")
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", self.data_dir,
             "--kafka-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.ready = threading.Event()
        self.kafka = self.admin = None
        self.listeners = {}
        threading.Thread(target=self._drain, daemon=True).start()
        if not self.ready.wait(30):
            self.stop()
            raise RuntimeError("strata printed no READY line within 30 s:\n" + self.output())
        if self.kafka is None:
            raise RuntimeError("strata exited before READY:\n" + self.output())

    def _drain(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            self.log.write(b"[out] " + raw)
            self.log.flush()
            if line.startswith("READY ") and not self.ready.is_set():
                fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                self.kafka, self.admin = fields.get("kafka"), fields.get("admin")
                self.listeners = dict(l.split("@", 1) for l in fields.get("listeners", "").split(",") if "@" in l)
                self.ready.set()
        self.ready.set()

    def output(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-20000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


RESULTS = []


def step(name, fn):
    started = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any failure is a failed step
        RESULTS.append((name, False))
        print(f"FAIL {name} ({time.monotonic() - started:.1f}s): {type(e).__name__}: {e}", flush=True)
        tb = traceback.format_exc().strip().splitlines()
        print("     " + "\n     ".join(tb[-6:]), flush=True)
    else:
        RESULTS.append((name, True))
        print(f"PASS {name} ({time.monotonic() - started:.1f}s)", flush=True)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def topic_name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def messages(n, tag):
    """(key, value, headers) tuples; headers as a list of (str, bytes)."""
    out = []
    for i in range(n):
        key = f"{tag}-key-{i:05d}".encode()
        value = (f"{tag} value {i} " + "xyz" * (i % 40)).encode()
        headers = [("index", str(i).encode()), ("tag", tag.encode())] if i % 5 else []
        out.append((key, value, headers))
    return out


def run(binary, keep):
    from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec
    import kafka
    import kafka.errors
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType as KpConfigResourceType
    from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic
    from kafka.structs import TopicPartition as KpTopicPartition

    workdir = tempfile.mkdtemp(prefix="strata-compat-")
    # Plaintext first (every step but the security ones uses it), then SASL over TLS and not;
    # the certificates come from the script the README tells users to run.
    certs = os.path.join(workdir, "certs")
    subprocess.run([os.path.join(HERE, "make-certs.sh"), certs], check=True, capture_output=True)
    # Two log directories (JBOD): partitions spread over both, one moved between them below.
    log_dirs = [os.path.join(workdir, "disk1"), os.path.join(workdir, "disk2")]
    broker = Broker(binary, workdir, {
        "STRATA_LOG_DIRS": ",".join(log_dirs),
        "STRATA_LISTENERS": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "STRATA_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "STRATA_SSL_CERTIFICATE_LOCATION": os.path.join(certs, "server.pem"),
        "STRATA_SSL_KEY_LOCATION": os.path.join(certs, "server.key"),
        # ACLs on: the loopback PLAINTEXT client and carol are super users, dave gets grants.
        "STRATA_AUTHORIZER_ENABLE": "true",
        "STRATA_SUPER_USERS": "User:ANONYMOUS;User:carol",
    })
    bootstrap = broker.kafka
    print(f"strata ready: kafka={broker.kafka} admin={broker.admin} (data {broker.data_dir})", flush=True)
    ck_conf = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}

    ck_topic = topic_name("compat-confluent")
    kp_topic = topic_name("compat-kafkapython")
    kcat_topic = topic_name("compat-kcat")
    ts_topic = topic_name("compat-timestamps")
    ck_msgs = messages(300, "ck")
    kp_msgs = messages(200, "kp")
    ts_base = int(time.time() * 1000) - 3_600_000
    state = {}

    admin_client = AdminClient(ck_conf)  # kept alive: futures fail if their client is dropped

    def ck_admin():
        return admin_client

    def ck_create(topic, partitions, config=None):
        fs = ck_admin().create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                                config=config or {})])
        fs[topic].result(15)

    def ck_consume(topic, partitions, expected_count, timeout=30):
        c = Consumer({**ck_conf, "group.id": topic_name("compat-group"), "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        try:
            c.assign([TopicPartition(topic, p, 0) for p in partitions])
            out = []
            deadline = time.monotonic() + timeout
            while len(out) < expected_count and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    continue
                out.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
            check(len(out) == expected_count, f"consumed {len(out)} of {expected_count} records from {topic}")
            return out
        finally:
            c.close()

    def compare_per_partition(sent_by_partition, got, what):
        by_part = {}
        for p, off, k, v, h in got:
            by_part.setdefault(p, []).append((off, k, v, h))
        for p, sent in sent_by_partition.items():
            recs = by_part.get(p, [])
            check(len(recs) == len(sent), f"{what}: partition {p} has {len(recs)} records, sent {len(sent)}")
            for n, ((off, k, v, h), (sk, sv, sh)) in enumerate(zip(recs, sent)):
                check(off == n, f"{what}: partition {p} record {n} at offset {off}")
                check((k, v) == (sk, sv), f"{what}: partition {p} offset {off}: got {(k, v)!r}, sent {(sk, sv)!r}")
                check([(hk, bytes(hv) if hv is not None else None) for hk, hv in h] == sh,
                      f"{what}: partition {p} offset {off}: headers {h!r}, sent {sh!r}")

    # ---------------------------------------------------------------- confluent-kafka
    def confluent_create_topic():
        fs = ck_admin().create_topics([NewTopic(ck_topic, num_partitions=3, replication_factor=1,
                                                config={"retention.ms": "3600000", "segment.bytes": "1048576"})],
                                      operation_timeout=10)
        fs[ck_topic].result(15)
        fs = ck_admin().create_topics([NewTopic(ts_topic, num_partitions=1, replication_factor=1),
                                       NewTopic(kcat_topic, num_partitions=1, replication_factor=1)])
        for f in fs.values():
            f.result(15)
        # Creating it again is an error (TOPIC_ALREADY_EXISTS).
        fs = ck_admin().create_topics([NewTopic(ck_topic, num_partitions=3, replication_factor=1)])
        try:
            fs[ck_topic].result(15)
        except KafkaException as e:
            check(e.args[0].code() == 36, f"duplicate create failed with {e}, expected TOPIC_ALREADY_EXISTS")
        else:
            raise AssertionError("creating an existing topic succeeded")

    def confluent_list_topics():
        for what, md in [("one topic", lambda: ck_admin().list_topics(ck_topic, timeout=10)),
                         ("all topics", lambda: ck_admin().list_topics(timeout=10))]:
            md = md()
            check(ck_topic in md.topics, f"list_topics({what}): {ck_topic} not in metadata")
            check(len(md.topics[ck_topic].partitions) == 3,
                  f"list_topics({what}): {len(md.topics[ck_topic].partitions)} partitions, expected 3")
            brokers = [f"{b.host}:{b.port}" for b in md.brokers.values()]
            check(brokers == [bootstrap], f"list_topics({what}): brokers {brokers}, expected [{bootstrap}]")

    def confluent_produce():
        p = Producer({**ck_conf, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                      "compression.type": "lz4"})
        delivered = {}
        errors = []

        def cb(err, msg):
            if err:
                errors.append(err)
            else:
                delivered[msg.key()] = (msg.partition(), msg.offset())

        for k, v, h in ck_msgs:
            p.produce(ck_topic, key=k, value=v, headers=h or None, on_delivery=cb)
            p.poll(0)
        left = p.flush(30)
        check(left == 0 and not errors, f"{left} undelivered, errors {errors[:3]}")
        check(len(delivered) == len(ck_msgs), f"{len(delivered)} delivery reports for {len(ck_msgs)}")
        by_part = {}
        for k, v, h in ck_msgs:
            by_part.setdefault(delivered[k][0], []).append((k, v, h))
        state["ck_by_partition"] = by_part
        # Timestamped records for offsets_for_times / kcat -Q: ts_base + 1000*i, i in 0..10.
        p2 = Producer({**ck_conf, "acks": "all", "linger.ms": 50})
        for i in range(10):
            p2.produce(ts_topic, key=f"t{i}".encode(), value=b"ts", timestamp=ts_base + 1000 * i)
        check(p2.flush(30) == 0, "timestamped records not delivered")

    def confluent_consume():
        got = ck_consume(ck_topic, [0, 1, 2], len(ck_msgs))
        compare_per_partition(state["ck_by_partition"], got, "confluent read-back")

    def confluent_consumer_protocol():
        # KIP-848 (group.protocol=consumer): the coordinator assigns ck_topic's three
        # partitions; every record is read once, committed, and the group shows as a
        # consumer group.
        group = topic_name("compat-kip848")
        c = Consumer({**ck_conf, "group.id": group, "group.protocol": "consumer",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            c.subscribe([ck_topic])
            seen = set()
            deadline = time.monotonic() + 60
            while len(seen) < len(ck_msgs) and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None or m.error():
                    continue
                seen.add((m.partition(), m.offset()))
            check(len(seen) == len(ck_msgs), f"consumer protocol read {len(seen)} of {len(ck_msgs)}")
            check({tp.partition for tp in c.assignment()} == {0, 1, 2}, f"assignment {c.assignment()}")
            c.commit(asynchronous=False)
            groups = ck_admin().list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15)
            check(any(g.group_id == group for g in groups.valid), f"listed as a consumer group: {groups.valid}")
        finally:
            c.close()
        committed = Consumer({**ck_conf, "group.id": group}).committed(
            [TopicPartition(ck_topic, p) for p in range(3)], timeout=10)
        check(sum(tp.offset for tp in committed) == len(ck_msgs), f"committed {committed}")

    def confluent_list_offsets():
        c = Consumer({**ck_conf, "group.id": topic_name("compat-group")})
        try:
            total = 0
            for p in range(3):
                lo, hi = c.get_watermark_offsets(TopicPartition(ck_topic, p), timeout=10)
                check(lo == 0, f"low watermark of partition {p} is {lo}")
                check(hi == len(state["ck_by_partition"].get(p, [])), f"high watermark of partition {p} is {hi}")
                total += hi
            check(total == len(ck_msgs), f"high watermarks sum to {total}")
            want = {ts_base - 5000: 0, ts_base + 2500: 3, ts_base + 9000: 9, ts_base + 9001: -1}
            # One call per timestamp: a list may hold each partition only once.
            res = [c.offsets_for_times([TopicPartition(ts_topic, 0, ts)], timeout=10)[0] for ts in want]
            for (ts, off), r in zip(want.items(), res):
                check(r.offset == off, f"offsets_for_times(base{ts - ts_base:+}) = {r.offset}, expected {off}")
        finally:
            c.close()
        specs = {TopicPartition(ck_topic, p): OffsetSpec.latest() for p in range(3)}
        res = ck_admin().list_offsets(specs, request_timeout=10)
        total = sum(f.result(15).offset for f in res.values())
        check(total == len(ck_msgs), f"AdminClient.list_offsets latest sums to {total}")
        res = ck_admin().list_offsets({TopicPartition(ck_topic, 0): OffsetSpec.earliest()})
        check(list(res.values())[0].result(15).offset == 0, "AdminClient.list_offsets earliest")
        # MAX_TIMESTAMP answers the record holding the newest timestamp, not the last of its
        # batch (KAFKA-16310): three records in one batch, the newest in the middle.
        max_topic = topic_name("compat-max-ts")
        ck_create(max_topic, 1)
        p = Producer({**ck_conf, "linger.ms": 200})
        for i, dt in enumerate([100, 400, 200]):
            p.produce(max_topic, key=f"m{i}".encode(), value=b"v", timestamp=ts_base + dt)
        check(p.flush(30) == 0, "max-timestamp records not delivered")
        res = ck_admin().list_offsets({TopicPartition(max_topic, 0): OffsetSpec.max_timestamp()})
        got = list(res.values())[0].result(15)
        check((got.offset, got.timestamp) == (1, ts_base + 400),
              f"AdminClient.list_offsets max_timestamp = ({got.offset}, {got.timestamp}), expected (1, base+400)")

    def confluent_describe_configs():
        fs = ck_admin().describe_configs([ConfigResource(ConfigResource.Type.TOPIC, ck_topic)])
        configs = list(fs.values())[0].result(15)
        check("retention.ms" in configs, f"no retention.ms in {sorted(configs)}")
        check(configs["retention.ms"].value == "3600000", f"retention.ms = {configs['retention.ms'].value}")
        check(configs["segment.bytes"].value == "1048576", f"segment.bytes = {configs['segment.bytes'].value}")
        check("cleanup.policy" in configs, "no cleanup.policy (a default) in the described configs")

    def confluent_alter_configs():
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
        topic = topic_name("compat-alter")
        ck_create(topic, 1, {"retention.ms": "3600000", "segment.bytes": "1048576"})
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)

        def described(key):
            return ck_admin().describe_configs([res])[res].result(15)[key].value

        # Legacy AlterConfigs: the named configs become the whole set of overrides.
        legacy = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"max.message.bytes": "2000"})
        ck_admin().alter_configs([legacy])[legacy].result(15)
        check(described("max.message.bytes") == "2000", "legacy alter_configs did not set max.message.bytes")
        check(described("retention.ms") == "604800000", "legacy alter_configs kept an override it did not name")
        bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"cleanup.policy": "shred"})
        try:
            ck_admin().alter_configs([bad])[bad].result(15)
        except KafkaException as e:
            check(e.args[0].code() == KafkaError.INVALID_CONFIG, f"bad legacy alter failed with {e}")
        else:
            raise AssertionError("cleanup.policy=shred was accepted")
        check(described("max.message.bytes") == "2000", "a refused alter changed the topic")
        # IncrementalAlterConfigs APPEND on the LIST config cleanup.policy.
        inc = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
        ck_admin().incremental_alter_configs([inc])[inc].result(15)
        check(described("cleanup.policy") == "delete,compact",
              f"cleanup.policy after APPEND compact: {described('cleanup.policy')}")
        # KIP-467: a batch of keyed and keyless records to the now compacted topic fails the
        # keyless ones (INVALID_RECORD), the others as "a different record was invalid".
        reports = {}
        p = Producer({**ck_conf, "linger.ms": 300, "enable.idempotence": False})
        for i in range(6):
            key = None if i in (1, 4) else f"k{i}".encode()
            p.produce(topic, key=key, value=b"v", partition=0,
                      on_delivery=lambda err, msg, i=i: reports.__setitem__(i, err))
        p.flush(30)
        check(len(reports) == 6, f"{len(reports)} delivery reports of 6")
        for i, err in sorted(reports.items()):
            if i in (1, 4):
                check(err is not None and err.code() == KafkaError.INVALID_RECORD, f"keyless record {i}: {err}")
            else:
                check(err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD,
                      f"keyed record {i}: {err}")

    def confluent_broker_configs():
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigSource
        broker = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = ck_admin().describe_configs([broker])[broker].result(15)
        for key in ("advertised.listeners", "log.dirs", "num.partitions", "log.retention.ms"):
            check(key in configs, f"broker config {key} missing from {len(configs)} described")
        check(configs["num.partitions"].is_read_only, "num.partitions is not read-only")
        check(not configs["log.retention.ms"].is_read_only, "log.retention.ms is read-only")
        check(configs["data.dir"].source == ConfigSource.STATIC_BROKER_CONFIG.value,
              f"data.dir source {configs['data.dir'].source}")
        check(configs["log.dirs"].value == ",".join(log_dirs),
              f"log.dirs {configs['log.dirs'].value}, set to {','.join(log_dirs)}")
        check(configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value,
              f"log.dirs source {configs['log.dirs'].source}")
        # A dynamic value for this broker (the Python binding refuses the cluster-wide
        # resource's empty name): a topic without its own retention.ms follows it.
        topic = topic_name("compat-broker-default")
        ck_create(topic, 1, {})
        wide = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
        ck_admin().incremental_alter_configs([wide])[wide].result(15)
        try:
            res = ConfigResource(ConfigResource.Type.TOPIC, topic)
            entry = ck_admin().describe_configs([res])[res].result(15)["retention.ms"]
            check((entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
                  f"retention.ms = {entry.value} from source {entry.source}")
            bad = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
                ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
            try:
                ck_admin().incremental_alter_configs([bad])[bad].result(15)
            except KafkaException as e:
                # Kafka answers INVALID_REQUEST for a broker config it will not change.
                check(e.args[0].code() == KafkaError.INVALID_REQUEST, f"read-only change failed with {e}")
            else:
                raise AssertionError("num.partitions changed at run time")
            # A Kafka dynamic config Strata has no use for is accepted, stored and described.
            inert = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
                ConfigEntry("num.io.threads", "16", incremental_operation=AlterConfigOpType.SET)])
            ck_admin().incremental_alter_configs([inert])[inert].result(15)
            entry = ck_admin().describe_configs([broker])[broker].result(15)["num.io.threads"]
            check((entry.value, entry.source) == ("16", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
                  f"num.io.threads = {entry.value} from source {entry.source}")
        finally:
            undo = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
                ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
                ConfigEntry("num.io.threads", None, incremental_operation=AlterConfigOpType.DELETE)])
            ck_admin().incremental_alter_configs([undo])[undo].result(15)

    def confluent_elect_leaders():
        from confluent_kafka import ElectionType
        parts = [TopicPartition(ck_topic, p) for p in range(3)]
        res = ck_admin().elect_leaders(ElectionType.PREFERRED, parts).result(15)
        check(len(res) == 3, f"elect_leaders answered {len(res)} partitions")
        for tp, err in res.items():
            # One node leads everything it is preferred for: nothing to elect.
            code = err.code() if err is not None else None
            check(code == KafkaError.ELECTION_NOT_NEEDED,
                  f"elect_leaders {tp.topic}-{tp.partition}: {err}")

    step("confluent-kafka: create topics (AdminClient.create_topics)", confluent_create_topic)
    step("confluent-kafka: metadata (AdminClient.list_topics, one topic and all topics)", confluent_list_topics)
    step("confluent-kafka: produce 300 keyed records with headers (idempotent, lz4)", confluent_produce)
    step("confluent-kafka: consume and compare per partition", confluent_consume)
    step("confluent-kafka: the KIP-848 consumer protocol (group.protocol=consumer)", confluent_consumer_protocol)
    step("confluent-kafka: list offsets (watermarks, offsets_for_times, AdminClient.list_offsets)",
         confluent_list_offsets)
    step("confluent-kafka: describe configs", confluent_describe_configs)
    step("confluent-kafka: legacy alter_configs, APPEND to cleanup.policy, per-record produce errors (KIP-467)",
         confluent_alter_configs)
    step("confluent-kafka: broker configs by Kafka's names, a dynamic broker config",
         confluent_broker_configs)
    step("confluent-kafka: preferred leader election (AdminClient.elect_leaders)", confluent_elect_leaders)

    # ---------------------------------------------------------------- kafka-python
    def kp_admin():
        return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)

    def kafkapython_create_topic():
        admin = kp_admin()
        try:
            admin.create_topics([KpNewTopic(kp_topic, 2, 1, topic_configs={"retention.ms": "7200000"})])
            topics = admin.list_topics()
            check(kp_topic in topics, f"{kp_topic} not in {topics}")
        finally:
            admin.close()

    def kafkapython_produce():
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, compression_type="gzip")
        try:
            futures = [(m, p.send(kp_topic, key=m[0], value=m[1], headers=m[2])) for m in kp_msgs]
            p.flush(30)
            by_part = {}
            for m, f in futures:
                md = f.get(timeout=30)
                by_part.setdefault(md.partition, []).append(m)
            state["kp_by_partition"] = by_part
        finally:
            p.close(10)

    def kp_consume(topic, partitions, count):
        c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", consumer_timeout_ms=2000)
        try:
            tps = [KpTopicPartition(topic, p) for p in partitions]
            c.assign(tps)
            c.seek_to_beginning(*tps)
            out = []
            deadline = time.monotonic() + 30
            while len(out) < count and time.monotonic() < deadline:
                for tp, recs in c.poll(timeout_ms=500).items():
                    for r in recs:
                        out.append((tp.partition, r.offset, r.key, r.value, list(r.headers or [])))
            check(len(out) == count, f"kafka-python consumed {len(out)} of {count} from {topic}")
            return out
        finally:
            c.close()

    def kafkapython_consume():
        got = kp_consume(kp_topic, [0, 1], len(kp_msgs))
        compare_per_partition(state["kp_by_partition"], got, "kafka-python read-back")

    def kafkapython_reads_confluent():
        got = kp_consume(ck_topic, [0, 1, 2], len(ck_msgs))
        compare_per_partition(state["ck_by_partition"], got, "kafka-python reading confluent's lz4 batches")

    def confluent_reads_kafkapython():
        got = ck_consume(kp_topic, [0, 1], len(kp_msgs))
        compare_per_partition(state["kp_by_partition"], got, "confluent reading kafka-python's gzip batches")

    def gzip_topic_recompresses():
        # compression.type=gzip on the topic: lz4, zstd and uncompressed producers' batches are
        # stored as gzip (Kafka's broker-side recompression); both clients read all back.
        topic = topic_name("compat-gzip-topic")
        ck_create(topic, 1, {"compression.type": "gzip"})
        sent = []
        for codec in ["lz4", "zstd", "none"]:
            p = Producer({**ck_conf, "compression.type": codec, "linger.ms": 20})
            for i in range(100):
                key, value = f"{codec}-{i}".encode(), f"value {i} via {codec}".encode() * 3
                p.produce(topic, key=key, value=value, partition=0)
                sent.append((key, value, []))
            check(p.flush(30) == 0, f"{codec} records not delivered")
        kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        for i in range(100):
            key, value = f"kp-{i}".encode(), f"kafka-python value {i}".encode()
            kp.send(topic, key=key, value=value, partition=0)
            sent.append((key, value, []))
        kp.flush(30)
        kp.close(10)
        compare_per_partition({0: sent}, ck_consume(topic, [0], len(sent)), "confluent reading a gzip topic")
        compare_per_partition({0: sent}, kp_consume(topic, [0], len(sent)), "kafka-python reading a gzip topic")

    def kafkapython_infers_4_0():
        # kafka-python infers the broker's version from ApiVersions (ListOffsets v10 is 4.0's).
        c = kafka.KafkaConsumer(bootstrap_servers=bootstrap)
        try:
            check(c.config.get("api_version") >= (4, 0), f"kafka-python inferred {c.config.get('api_version')}")
        finally:
            c.close()

    def kafkapython_features():
        # Feature levels (KIP-584): group.version 1 (KIP-848's consumer protocol) and
        # transaction.version 2 (KIP-890 part 2) are what Strata implements; UpdateFeatures
        # confirms them and refuses any other level.
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            features = admin.describe_features()
            check(features.get("group.version") == {"supported": (1, 1), "finalized": (1, 1), "finalized_epoch": 0},
                  f"describe_features: {features}")
            check(features.get("transaction.version") == {"supported": (2, 2), "finalized": (2, 2), "finalized_epoch": 0},
                  f"describe_features: {features}")
            check(admin.update_features({"transaction.version": 2}) == {"transaction.version": "OK"},
                  "level 2 confirmed")
            for update in ({"transaction.version": 0}, {"group.version": 0}, {"metadata.version": 25}):
                try:
                    admin.update_features(update)
                    check(False, f"update_features({update}) accepted")
                except kafka.errors.InvalidUpdateVersionError:
                    pass
            check(admin.describe_features() == features, "nothing changed")
            # ListClientMetricsResources (ListConfigResources v0): no client-metrics resource
            # exists here (none can be created), and the API says so.
            check(admin.list_config_resources() == {}, "no client-metrics resources")
        finally:
            admin.close()

    def kafkapython_list_offsets():
        c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        try:
            tps = [KpTopicPartition(kp_topic, p) for p in range(2)]
            end = c.end_offsets(tps)
            begin = c.beginning_offsets(tps)
            check(all(v == 0 for v in begin.values()), f"beginning_offsets {begin}")
            check(sum(end.values()) == len(kp_msgs), f"end_offsets {end} sum != {len(kp_msgs)}")
            for tp in tps:
                check(end[tp] == len(state["kp_by_partition"].get(tp.partition, [])), f"end offset of {tp}")
            tp = KpTopicPartition(ts_topic, 0)
            for ts, want in [(ts_base - 5000, 0), (ts_base + 4500, 5), (ts_base + 9000, 9), (ts_base + 10_000, None)]:
                got = c.offsets_for_times({tp: ts})[tp]
                if want is None:
                    check(got is None, f"offsets_for_times(base{ts - ts_base:+}) = {got}, expected None")
                else:
                    check(got is not None and got.offset == want and got.timestamp == ts_base + 1000 * want,
                          f"offsets_for_times(base{ts - ts_base:+}) = {got}, expected offset {want}")
        finally:
            c.close()

    def kafkapython_describe_configs():
        admin = kp_admin()
        try:
            res = admin.describe_configs([KpConfigResource(KpConfigResourceType.TOPIC, kp_topic)])
            entries = {}
            if isinstance(res, dict):  # kafka-python >= 3: {type: {name: {key: {"value": ...}}}}
                check(kp_topic in res.get("topic", {}), f"no entry for {kp_topic} in {res}")
                entries = {k: v.get("value") for k, v in res["topic"][kp_topic].items()}
            else:  # kafka-python 2.x: a list of raw DescribeConfigsResponse
                for r in res:
                    for resource in r.resources:
                        check(resource[0] == 0, f"describe_configs error {resource[0]} {resource[1]}")
                        for entry in resource[4]:
                            entries[entry[0]] = entry[1]
            check(entries.get("retention.ms") == "7200000",
                  f"retention.ms = {entries.get('retention.ms')} in {entries}")
        finally:
            admin.close()

    def kafkapython_broker_loggers():
        from kafka.admin import AlterConfigOp
        admin = kp_admin()
        try:
            logger = "strata_broker::replication"
            res = admin.alter_configs([KpConfigResource(KpConfigResourceType.BROKER_LOGGER, "1",
                                                        {logger: (AlterConfigOp.SET, "DEBUG")})],
                                      raise_on_unknown=False, incremental=True)
            check(res.get("broker_logger", {}).get("1") == "OK", f"alter_configs BROKER_LOGGER: {res}")
            res = admin.describe_configs([KpConfigResource(KpConfigResourceType.BROKER_LOGGER, "1")],
                                         config_filter="all")
            loggers = {k: v.get("value") for k, v in res["broker_logger"]["1"].items()}
            check(loggers.get(logger) == "DEBUG" and loggers.get("root") == "INFO", f"loggers: {loggers}")
            admin.alter_configs([KpConfigResource(KpConfigResourceType.BROKER_LOGGER, "1",
                                                  {logger: (AlterConfigOp.DELETE, None)})],
                                raise_on_unknown=False, incremental=True)
        finally:
            admin.close()

    def kafkapython_reassignments():
        admin = kp_admin()
        try:
            tp0, tp1 = KpTopicPartition(kp_topic, 0), KpTopicPartition(kp_topic, 1)
            # Broker 9 does not exist: refused with INVALID_REPLICA_ASSIGNMENT; the same
            # replica (a one-node cluster) is accepted and completes at once.
            res = admin.alter_partition_reassignments({tp0: [9], tp1: [1]})
            check(res.get(tp0) is not None and res[tp0].errno == 39,
                  f"unknown broker: {res}")
            check(tp1 in res and res[tp1] is None, f"same replicas: {res}")
            ongoing = admin.list_partition_reassignments()
            check(ongoing == {}, f"nothing moving: {ongoing}")
            dirs = admin.describe_log_dirs()
            found = [p for b in dirs for d in b["log_dirs"] for t in d["topics"]
                     if t["name"] == kp_topic for p in t["partitions"]]
            check(len(found) == 2 and all(p["partition_size"] > 0 for p in found),
                  f"DescribeLogDirs: {dirs}")
        finally:
            admin.close()

    def kafkapython_move_between_log_dirs():
        from kafka import TopicPartitionReplica
        admin = kp_admin()
        try:
            def dir_of(partition):
                for b in admin.describe_log_dirs():
                    for d in b["log_dirs"]:
                        for t in d["topics"]:
                            if t["name"] == kp_topic and any(
                                    p["partition_index"] == partition and not p["is_future_key"]
                                    for p in t["partitions"]):
                                return d["log_dir"]
                return None
            before = dir_of(0)
            check(before is not None, "partition 0 in no log directory")
            dest = next(os.path.realpath(d) for d in log_dirs if os.path.realpath(d) != before)
            res = admin.alter_replica_log_dirs({TopicPartitionReplica(kp_topic, 0, 1): dest})
            check(all(e.errno == 0 for e in res.values()), f"alter_replica_log_dirs: {res}")
            deadline = time.monotonic() + 30
            while dir_of(0) != dest:
                check(time.monotonic() < deadline, f"partition 0 still in {dir_of(0)}")
                time.sleep(0.1)
            bad = admin.alter_replica_log_dirs({TopicPartitionReplica(kp_topic, 0, 1): "/no/such/dir"})
            check(all(e.errno == 57 for e in bad.values()), f"unknown directory: {bad}")
        finally:
            admin.close()
        # Every record is still there, read through the moved replica.
        got = kp_consume(kp_topic, [0, 1], len(kp_msgs))
        compare_per_partition(state["kp_by_partition"], got, "kafka-python read-back after the move")

    def metric(name):
        """Sum of a metric's samples in the broker's /metrics."""
        body = urllib.request.urlopen(f"http://{broker.admin}/metrics", timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                   if line.startswith(name + " ") or line.startswith(name + "{"))

    def kafkapython_group_with_fetch_sessions():
        # kafka-python fetches with incremental sessions (KIP-227), librdkafka does not: a group
        # over 2,000 partitions reads every record exactly once through them. Half the records
        # are there before it joins, half come while it reads; fetch_max_bytes keeps each
        # response to a few hundred partitions, so most data comes in incremental fetches.
        topic = topic_name("compat-sessions")
        n_parts, n = 2000, 8000
        fs = ck_admin().create_topics([NewTopic(topic, num_partitions=n_parts, replication_factor=1)])
        fs[topic].result(60)
        p = Producer({**ck_conf, "linger.ms": 20})

        def produce(keys):
            for i in keys:
                p.produce(topic, key=str(i).encode(), value=f"value {i}".encode(), partition=i % n_parts)
                p.poll(0)
            check(p.flush(60) == 0, "records left unflushed")

        produce(range(n // 2))
        incremental_before = metric("strata_fetch_incremental_total")
        c = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=topic_name("compat-sessions"),
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                fetch_max_bytes=65536)
        try:
            seen = {}

            def read_until(count):
                deadline = time.monotonic() + 120
                while len(seen) < count and time.monotonic() < deadline:
                    for tp, recs in c.poll(timeout_ms=500).items():
                        for r in recs:
                            k = int(r.key)
                            check(k not in seen, f"record {k} read twice (offsets {seen.get(k)} and {r.offset})")
                            check(tp.partition == k % n_parts and r.offset == k // n_parts,
                                  f"record {k} at {tp.partition}/{r.offset}")
                            seen[k] = r.offset
                check(len(seen) == count, f"the group read {len(seen)} of {count} records")

            read_until(n // 2)
            produce(range(n // 2, n))
            read_until(n)
            check(metric("strata_fetch_sessions") >= 1, "no fetch session open while consuming")
            incremental = metric("strata_fetch_incremental_total") - incremental_before
            check(incremental >= 4, f"only {incremental} of kafka-python's fetches were incremental")
            extra = sum(len(v) for v in c.poll(timeout_ms=1000).values())
            check(extra == 0, f"{extra} records after all {n}")
            print(f"     {incremental:.0f} incremental fetches; "
                  f"{metric('strata_fetch_session_errors_total'):.0f} session errors", flush=True)
        finally:
            c.close()

    step("kafka-python: create topic (KafkaAdminClient.create_topics)", kafkapython_create_topic)
    step("kafka-python: produce 200 keyed records with headers (gzip)", kafkapython_produce)
    step("kafka-python: consume and compare per partition", kafkapython_consume)
    step("kafka-python: read back confluent-kafka's records", kafkapython_reads_confluent)
    step("confluent-kafka + kafka-python: a compression.type=gzip topic fed lz4, zstd and uncompressed batches",
         gzip_topic_recompresses)
    step("confluent-kafka: read back kafka-python's records", confluent_reads_kafkapython)
    step("kafka-python: infers Kafka 4.0 from ApiVersions", kafkapython_infers_4_0)
    step("kafka-python: feature levels (describe_features, update_features)", kafkapython_features)
    step("kafka-python: list offsets (end_offsets, beginning_offsets, offsets_for_times)", kafkapython_list_offsets)
    step("kafka-python: describe configs", kafkapython_describe_configs)
    step("kafka-python: a broker logger's level (BROKER_LOGGER)", kafkapython_broker_loggers)
    step("kafka-python: a replica moved between log directories (alter_replica_log_dirs)",
         kafkapython_move_between_log_dirs)
    step("kafka-python: a group over 2,000 partitions with fetch sessions reads every record once",
         kafkapython_group_with_fetch_sessions)
    step("kafka-python: reassignments and log dirs (alter/list_partition_reassignments, describe_log_dirs)",
         kafkapython_reassignments)

    # ---------------------------------------------------------------- transactions
    txn_topic = topic_name("compat-txn")
    txn_group = topic_name("compat-txn-group")
    txn_id = topic_name("compat-txn-id")

    def txn_records(tag, n):
        return [f"{tag}-{i}".encode() for i in range(n)]

    def confluent_transactions():
        ck_admin().create_topics([NewTopic(txn_topic, num_partitions=2, replication_factor=1)])[txn_topic].result(15)
        p = Producer({**ck_conf, "transactional.id": txn_id, "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        p.begin_transaction()
        for i, v in enumerate(txn_records("ck-aborted", 10)):
            p.produce(txn_topic, value=v, partition=i % 2)
        p.flush(30)  # written, then aborted (an abort purges what was never sent)
        p.abort_transaction(30)
        # A committed transaction that also commits a group's offsets (consume-transform-produce).
        group_member = Consumer({**ck_conf, "group.id": txn_group, "enable.auto.commit": False})
        p.begin_transaction()
        for i, v in enumerate(txn_records("ck-committed", 10)):
            p.produce(txn_topic, value=v, partition=i % 2)
        p.send_offsets_to_transaction([TopicPartition(ck_topic, 0, 42)], group_member.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        committed = group_member.committed([TopicPartition(ck_topic, 0)], timeout=15)
        check(committed[0].offset == 42, f"offset committed in the transaction: {committed[0].offset}")
        group_member.close()
        # A second producer with the same transactional.id fences the first.
        p2 = Producer({**ck_conf, "transactional.id": txn_id})
        p2.init_transactions(30)
        try:
            p.begin_transaction()
            p.produce(txn_topic, value=b"zombie", partition=0)
            p.commit_transaction(30)
            check(False, "the fenced producer committed")
        except KafkaException as e:
            check(e.args[0].fatal() or e.args[0].code() == KafkaError._FENCED,
                  f"the fenced producer failed with {e}, expected a fatal fencing error")
        p2.begin_transaction()
        p2.produce(txn_topic, value=b"ck-after-fence", partition=1)
        p2.commit_transaction(30)

    def kafkapython_transactions():
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=topic_name("compat-kp-txn"))
        try:
            p.init_transactions()
            p.begin_transaction()
            for i, v in enumerate(txn_records("kp-committed", 10)):
                p.send(txn_topic, value=v, partition=i % 2)
            p.commit_transaction()
            p.begin_transaction()
            for i, v in enumerate(txn_records("kp-aborted", 10)):
                p.send(txn_topic, value=v, partition=i % 2)
            p.flush(30)
            p.abort_transaction()
        finally:
            p.close(10)

    txn_committed = sorted(txn_records("ck-committed", 10) + [b"ck-after-fence"] + txn_records("kp-committed", 10))
    txn_everything = sorted(txn_committed + txn_records("ck-aborted", 10) + txn_records("kp-aborted", 10))

    def confluent_read_committed():
        for isolation, want in [("read_committed", txn_committed), ("read_uncommitted", txn_everything)]:
            c = Consumer({**ck_conf, "group.id": topic_name("compat-txn-reader"), "isolation.level": isolation,
                          "enable.auto.commit": False, "enable.partition.eof": True})
            try:
                c.assign([TopicPartition(txn_topic, p, 0) for p in (0, 1)])
                got, eof, deadline = [], set(), time.monotonic() + 30
                while len(eof) < 2 and time.monotonic() < deadline:
                    m = c.poll(0.2)
                    if m is None:
                        continue
                    if m.error():
                        eof.add(m.partition())
                        continue
                    eof.discard(m.partition())
                    got.append(m.value())
                check(sorted(got) == want, f"{isolation}: read {len(got)} records, want {len(want)}: {sorted(got)}")
            finally:
                c.close()

    def kafkapython_read_committed():
        for isolation, want in [("read_committed", txn_committed), ("read_uncommitted", txn_everything)]:
            c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", isolation_level=isolation)
            try:
                tps = [KpTopicPartition(txn_topic, p) for p in (0, 1)]
                c.assign(tps)
                c.seek_to_beginning(*tps)
                got, deadline = [], time.monotonic() + 30
                while len(got) < len(want) and time.monotonic() < deadline:
                    for recs in c.poll(timeout_ms=500).values():
                        got.extend(r.value for r in recs)
                extra = sum(len(v) for v in c.poll(timeout_ms=1000).values())
                check(sorted(got) == want and extra == 0,
                      f"kafka-python {isolation}: read {len(got)} (+{extra}) records, want {len(want)}")
            finally:
                c.close()

    step("confluent-kafka: transactions (abort, commit with group offsets, zombie fenced)", confluent_transactions)
    step("kafka-python: transactions (commit, abort)", kafkapython_transactions)
    step("confluent-kafka: read_committed sees only committed transactions", confluent_read_committed)
    step("kafka-python: read_committed sees only committed transactions", kafkapython_read_committed)

    # ---------------------------------------------------------------- kcat
    def kcat(*args, stdin=None, timeout=60):
        r = subprocess.run(["kcat", "-b", bootstrap, *args], input=stdin, capture_output=True, timeout=timeout)
        check(r.returncode == 0, f"kcat {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')[-2000:]}")
        return r.stdout.decode(errors="replace")

    def kcat_metadata():
        import json
        md = json.loads(kcat("-L", "-J"))
        topics = {t["topic"]: t for t in md["topics"]}
        check(ck_topic in topics, f"{ck_topic} not in kcat -L")
        check(len(topics[ck_topic]["partitions"]) == 3, "kcat -L: partition count")
        check(md["brokers"] and md["brokers"][0]["name"].startswith("127.0.0.1:"),
              f"advertised broker {md['brokers']}")
        text = kcat("-L", "-t", ck_topic)
        check(f'topic "{ck_topic}" with 3 partitions' in text, f"kcat -L -t output:\n{text}")

    kcat_lines = [f"kcat-key-{i}:kcat value {i} {'#' * (i % 13)}" for i in range(100)]

    def kcat_produce():
        kcat("-P", "-t", kcat_topic, "-K", ":", "-z", "snappy", stdin=("\n".join(kcat_lines) + "\n").encode())

    def kcat_consume():
        out = kcat("-C", "-t", kcat_topic, "-o", "beginning", "-e", "-f", "%k:%s|%o\n")
        got = [line for line in out.splitlines() if line]
        want = [f"{line}|{i}" for i, line in enumerate(kcat_lines)]
        check(got == want, f"kcat -C read {len(got)} lines; first differences: "
              f"{[(g, w) for g, w in zip(got, want) if g != w][:3]}")
        # And kcat reads what kafka-python wrote.
        out = kcat("-C", "-t", kp_topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k\n")
        want_keys = [k.decode() for k, _, _ in state["kp_by_partition"].get(0, [])]
        check(out.split() == want_keys, "kcat reading kafka-python's partition 0")

    def kcat_query():
        for ts, want in [(ts_base - 1, 0), (ts_base + 2500, 3), (ts_base + 7000, 7), (ts_base + 9001, -1)]:
            out = kcat("-Q", "-t", f"{ts_topic}:0:{ts}")
            check(f"offset {want}" in out, f"kcat -Q base{ts - ts_base:+}: expected offset {want}, got {out.strip()!r}")

    step("kcat: metadata (-L)", kcat_metadata)
    step("kcat: produce with keys (-P, snappy)", kcat_produce)
    step("kcat: consume and compare (-C -e)", kcat_consume)
    step("kcat: offset by timestamp (-Q)", kcat_query)

    # ------------------------------------------------------------ security
    ca = os.path.join(certs, "ca.pem")
    sasl_ssl, sasl_plain = broker.listeners["SASL_SSL"], broker.listeners["SASL_PLAINTEXT"]
    password = "compat-" + uuid.uuid4().hex

    def create_user():
        r = subprocess.run([binary, "user", "create", "carol", "--password", password, "-b", bootstrap],
                           capture_output=True, timeout=60)
        check(r.returncode == 0, f"strata user create: {r.stderr.decode(errors='replace')}")

    def confluent_scram_over_tls():
        conf = {"bootstrap.servers": sasl_ssl, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
                "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": password}
        topic = topic_name("compat-sasl")
        p = Producer(conf)
        for i in range(20):
            p.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
        check(p.flush(30) == 0, "undelivered records over SASL_SSL")
        c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        c.commit(asynchronous=False)
        c.close()
        check(got == [b"v%d" % i for i in range(20)], f"read back {len(got)} records over SASL_SSL")
        md = AdminClient(conf).list_topics(timeout=10)
        check([f"{b.host}:{b.port}" for b in md.brokers.values()] == [sasl_ssl],
              f"Metadata on SASL_SSL advertises {md.brokers}")

    def confluent_wrong_password():
        conf = {"bootstrap.servers": sasl_plain, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "wrong"}
        def failures():
            with urllib.request.urlopen(f"http://{broker.admin}/metrics", timeout=10) as r:
                text = r.read().decode()
            key = 'strata_sasl_authentications_total{listener="SASL_PLAINTEXT",mechanism="SCRAM-SHA-256",result="failed"}'
            return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(key))
        before = failures()
        try:
            AdminClient(conf).list_topics(timeout=5)
        except KafkaException as e:
            # librdkafka reports the refusal as a transport failure once its retries run out.
            check(any(w in str(e) for w in ("Authentication", "Timed out", "transport")), f"unexpected error: {e}")
        else:
            raise AssertionError("a wrong password was accepted")
        check(failures() > before, "the broker did not count the failed authentication")

    def kafkapython_sasl():
        for mechanism, addr, proto in [("SCRAM-SHA-256", sasl_ssl, "SASL_SSL"), ("PLAIN", sasl_plain, "SASL_PLAINTEXT")]:
            opts = dict(bootstrap_servers=addr, security_protocol=proto, sasl_mechanism=mechanism,
                        sasl_plain_username="carol", sasl_plain_password=password)
            if proto == "SASL_SSL":
                opts.update(ssl_cafile=ca, ssl_check_hostname=True)
            topic = topic_name("compat-kp-sasl")
            p = kafka.KafkaProducer(**opts, acks="all")
            for i in range(10):
                p.send(topic, key=b"k", value=b"v%d" % i)
            p.flush(30)
            p.close()
            c = kafka.KafkaConsumer(topic, **opts, auto_offset_reset="earliest", consumer_timeout_ms=10000)
            got = [m.value for m in c]
            c.close()
            check(got == [b"v%d" % i for i in range(10)], f"kafka-python {mechanism} read {len(got)} records")

    def kcat_sasl_ssl():
        r = subprocess.run(["kcat", "-b", sasl_ssl, "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={ca}",
                            "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=carol",
                            "-X", f"sasl.password={password}", "-L"], capture_output=True, timeout=60)
        out = r.stdout.decode(errors="replace")
        check(r.returncode == 0 and sasl_ssl in out, f"kcat -L over SASL_SSL: {r.stderr.decode(errors='replace')[-500:]}")

    def sasl_conf(user):
        return {"bootstrap.servers": sasl_plain, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}

    def create_dave():
        r = subprocess.run([binary, "user", "create", "dave", "--password", password, "-b", bootstrap],
                           capture_output=True, timeout=60)
        check(r.returncode == 0, f"strata user create dave: {r.stderr.decode(errors='replace')}")

    def dave_produces(topic):
        """None if dave's record to `topic` is acknowledged, else the error code."""
        results = []
        p = Producer({**sasl_conf("dave"), "message.timeout.ms": 10000})
        p.produce(topic, value=b"x", on_delivery=lambda err, msg: results.append(err))
        p.flush(20)
        check(len(results) == 1, f"no delivery report for {topic}")
        return None if results[0] is None else results[0].code()

    def confluent_acls():
        from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)
        allowed, other = topic_name("compat-acl"), topic_name("compat-noacl")
        admin = AdminClient(sasl_conf("carol"))
        admin.create_topics([NewTopic(t, 1, 1) for t in (allowed, other)])["%s" % allowed].result(30)
        grant = AclBinding(ResourceType.TOPIC, allowed, ResourcePatternType.LITERAL, "User:dave", "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW)
        for f in admin.create_acls([grant]).values():
            f.result(30)
        dave_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:dave", None,
                                       AclOperation.ANY, AclPermissionType.ANY)
        listed = admin.describe_acls(dave_filter).result(30)
        check(listed == [grant], f"describe_acls: {listed}")
        check(dave_produces(allowed) is None, "dave could not write the topic he was granted")
        check(dave_produces(other) == KafkaError.TOPIC_AUTHORIZATION_FAILED, "dave wrote a topic without a grant")
        deleted = [b for f in admin.delete_acls([dave_filter]).values() for b in f.result(30)]
        check(deleted == [grant], f"delete_acls: {deleted}")
        check(dave_produces(allowed) == KafkaError.TOPIC_AUTHORIZATION_FAILED, "the grant outlived its deletion")
        # The broker refuses dave's DescribeAcls (CLUSTER_AUTHORIZATION_FAILED, as the strata CLI
        # and kafka-python show); librdkafka 2.x turns that top-level error into an empty result.
        dave_admin = AdminClient(sasl_conf("dave"))  # kept alive while its future runs
        try:
            seen = dave_admin.describe_acls(dave_filter).result(30)
        except KafkaException as e:
            check(e.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, f"dave listed ACLs: {e}")
        else:
            check(seen == [], f"dave saw ACLs: {seen}")

    def kafkapython_acls():
        from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                                 ResourcePattern, ResourcePatternFilter, ResourceType as KpResourceType)
        opts = dict(bootstrap_servers=sasl_plain, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                    sasl_plain_password=password)
        prefix = topic_name("compat-kpacl") + "-"
        topic, group = prefix + "a", topic_name("compat-kpacl-group")
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap)
        p.send(topic, value=b"for dave")
        p.flush(30)
        p.close()
        admin = KafkaAdminClient(**opts, sasl_plain_username="carol")
        grants = [
            ACL("User:dave", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(KpResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED)),
            ACL("User:dave", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(KpResourceType.GROUP, group, ACLResourcePatternType.LITERAL)),
        ]
        created = admin.create_acls(grants)
        check(len(created["succeeded"]) == 2 and not created["failed"], f"create_acls: {created}")
        dave_filter = ACLFilter("User:dave", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        listed, _ = admin.describe_acls(dave_filter)
        check(len(listed) == 2, f"describe_acls: {listed}")
        c = kafka.KafkaConsumer(topic, **opts, sasl_plain_username="dave", group_id=group,
                                auto_offset_reset="earliest", consumer_timeout_ms=10000)
        got = [m.value for m in c]
        c.close()
        check(got == [b"for dave"], f"dave read {got} through his prefixed grant")
        results = admin.delete_acls([dave_filter])
        check(len(results) == 1 and len(results[0][1]) == 2, f"delete_acls: {results}")
        admin.close()
        dave_admin = KafkaAdminClient(**opts, sasl_plain_username="dave")
        try:
            dave_admin.describe_acls(dave_filter)
        except kafka.errors.ClusterAuthorizationFailedError:
            pass
        else:
            raise AssertionError("dave may not describe ACLs")
        finally:
            dave_admin.close()

    def quotas_throttle_clients():
        def strata_quota(*args):
            r = subprocess.run([binary, "quota", *args, "-b", bootstrap], capture_output=True, timeout=60)
            check(r.returncode == 0, f"strata quota {args}: {r.stderr.decode(errors='replace')}")
            return r.stdout.decode()
        # 64 KiB/s shared by all of carol's clients: after the 10 s burst (640 KiB), every
        # produce is throttled, and both clients are told so.
        strata_quota("alter", "--user", "carol", "--add", "producer_byte_rate=65536")
        listed = strata_quota("describe", "--user", "carol")
        check(listed.strip() == "user=carol\tproducer_byte_rate=65536", f"strata quota describe: {listed!r}")
        topic, value = topic_name("compat-quota"), b"q" * 8192
        throttles = []
        p = Producer({**sasl_conf("carol"), "throttle_cb": lambda e: throttles.append(e.throttle_time)})
        for _ in range(128):
            p.produce(topic, value=value)
            p.poll(0)
        check(p.flush(60) == 0, "undelivered records under a quota")
        check(max(throttles, default=0) > 0, "confluent-kafka got no throttle_cb")
        kp = kafka.KafkaProducer(bootstrap_servers=sasl_plain, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="carol",
                                 sasl_plain_password=password, acks="all", batch_size=16384, linger_ms=0)
        for _ in range(32):
            kp.send(topic, value=value)
        kp.flush(60)
        # kafka-python keeps the throttle times it honoured per connection and overall.
        throttle_max = max((v for group in kp.metrics().values() for k, v in group.items()
                            if k.endswith("throttle-time-max") and v == v), default=0)
        kp.close()
        check(throttle_max > 0, f"kafka-python saw no throttle (throttle-time-max {throttle_max})")
        strata_quota("alter", "--user", "carol", "--delete", "producer_byte_rate")
        check(strata_quota("describe").strip() == "", "the quota outlived its removal")

    step("strata: create a SCRAM user (strata user create)", create_user)
    step("confluent-kafka: SCRAM-SHA-512 over TLS (produce, group consume, listener's metadata)",
         confluent_scram_over_tls)
    step("confluent-kafka: a wrong password is refused", confluent_wrong_password)
    step("kafka-python: SCRAM-SHA-256 over TLS and PLAIN", kafkapython_sasl)
    step("kcat: metadata over SASL_SSL (-L)", kcat_sasl_ssl)
    step("strata: a second SCRAM user without grants", create_dave)
    step("confluent-kafka: ACLs (create_acls, describe_acls, delete_acls) decide what a user may write",
         confluent_acls)
    step("kafka-python: ACLs (prefixed topic and group grants, describe_acls, delete_acls)", kafkapython_acls)
    step("strata quota + confluent-kafka and kafka-python: a user's produce quota throttles its clients",
         quotas_throttle_clients)

    def clean_shutdown():
        rc = broker.stop()
        check(rc == 0, f"strata exited with {rc} after SIGTERM")
        check(password not in broker.output(), "a password reached the broker's log")

    step("strata: clean shutdown on SIGTERM", clean_shutdown)
    broker.stop()
    failed = [n for n, ok in RESULTS if not ok]
    if failed:
        print("---- strata output (tail) ----\n" + broker.output() + "\n---- end ----", flush=True)
    if keep or failed:
        print(f"work dir kept: {workdir}", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=default_bin(), help="strata binary (default: $STRATA_BIN or target/debug/strata)")
    ap.add_argument("--keep", action="store_true", help="keep the broker's work dir")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        print(f"strata binary not found: {args.bin}", file=sys.stderr)
        print("compat: 0 passed, 1 failed")
        return 1
    if shutil.which("kcat") is None:
        print("kcat not found on PATH", file=sys.stderr)
    try:
        run(args.bin, args.keep)
    except Exception:  # noqa: BLE001 - setup failure (imports, broker start) counts as a failure
        traceback.print_exc()
        RESULTS.append(("setup", False))
    passed = sum(1 for _, ok in RESULTS if ok)
    failed = len(RESULTS) - passed
    print(f"compat: {passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
