#!/usr/bin/env python3
"""Offline checks of the Kubernetes deployment (deploy/kubernetes), no cluster needed.

    ~/.cache/strata-venv/bin/python scripts/check-kubernetes.py [DIR]

1. The kustomization: every file it names exists, and every manifest in DIR is one it names.
2. Every manifest validates, strictly (no unknown fields), against the Kubernetes API schemas
   of kubernetes-validate (PyPI) for each version of --kubernetes-version. A resource whose
   schema is missing (a wrong or removed apiVersion) fails too, where the tool only warns.
3. With kubectl on PATH (not required), `kubectl kustomize DIR` is rendered and validated the
   same way, and the generated ConfigMap's name checked against the StatefulSet's reference.
4. The invariants the brokers depend on, read from the YAML: the StatefulSet starts its pods
   in parallel behind a headless service that publishes not-ready addresses, node id = pod
   ordinal, the voters are pods 0-2 by their stable DNS names on the raft port, advertised
   listeners use the pod's own name, probes on /readyz and /healthz of the admin port, a
   grace period for the controlled shutdown, a PodDisruptionBudget of one, and the rest below.

Prints one line per failed check and exits 1; prints "ok: N manifests, M invariants" and
exits 0 when everything holds. Run it with the Python that has kubernetes-validate (its
PyYAML is what this script reads YAML with).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
except ImportError:
    sys.exit(
        "check-kubernetes: PyYAML is missing: run this with the venv that has kubernetes-validate "
        "(~/.cache/strata-venv/bin/python -m pip install kubernetes-validate)"
    )
try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "deploy" / "kubernetes"
# The oldest version the manifests rely on (the apps.kubernetes.io/pod-index label, beta and on
# by default since 1.28) and the newest kubernetes-validate 1.37.0 has schemas for.
DEFAULT_VERSIONS = ["1.28.0", "1.37.0"]
KUSTOMIZATION = "kustomization.yaml"
POD_INDEX_FIELD = "metadata.labels['apps.kubernetes.io/pod-index']"
CLUSTER_DOMAIN = "svc.cluster.local"
IMAGE_GID = 10001  # deploy/docker/Dockerfile: user and group strata, 10001
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
INSTALL_HINT = "~/.cache/strata-venv/bin/python -m pip install kubernetes-validate"


class Checks:
    """Counts invariants and collects the failed ones."""

    def __init__(self):
        self.count = 0
        self.failures = []

    def check(self, name, ok, why=""):
        self.count += 1
        if not ok:
            self.failures.append(f"{name}: {why}" if why else name)
        return bool(ok)

    def fail(self, name, why):
        return self.check(name, False, why)


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def manifest_files(d):
    return sorted(
        p for p in d.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml") and p.name != KUSTOMIZATION
    )


# ---------------------------------------------------------------- kubernetes-validate


def validator_command():
    here = Path(sys.executable).parent / "kubernetes-validate"
    if here.exists():
        return [str(here)]
    found = shutil.which("kubernetes-validate")
    if found:
        return [found]
    return None


def validate(c, files, versions, what):
    """kubernetes-validate --strict on `files` for every version; every resource must pass."""
    cmd = validator_command()
    if cmd is None:
        c.fail("kubernetes-validate", f"not installed next to {sys.executable} nor on PATH: {INSTALL_HINT}")
        return
    expected = 0
    for f in files:
        try:
            expected += len(load_yaml_docs(f))
        except yaml.YAMLError:
            pass  # reported by the YAML parse check
    args = cmd + ["--strict"]
    for v in versions:
        args += ["-k", v]
    proc = subprocess.run(args + [str(f) for f in files], capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).splitlines()
    passed = [l for l in out if l.startswith("INFO") and " passed " in l]
    bad = [l for l in out if l.split(" ", 1)[0] in ("ERROR", "WARN", "FATAL") or l.startswith("Couldn't")]
    for line in bad:
        c.fail(f"kubernetes-validate ({what})", line)
    want = expected * len(versions)
    c.check(
        f"kubernetes-validate ({what})",
        proc.returncode == 0 and not bad and len(passed) == want,
        f"exit {proc.returncode}, {len(passed)} of {want} resource validations passed"
        + ("" if bad else ": " + " | ".join(out[-5:])),
    )
    return len(passed)


# ---------------------------------------------------------------- helpers on pod specs


def shell_script(container):
    """The script of a `sh -c SCRIPT` container (command and args joined), or ""."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if "-c" in argv:
        i = argv.index("-c")
        if i + 1 < len(argv):
            return str(argv[i + 1])
    return ""


def env_list(container):
    return list(container.get("env") or [])


def field_ref(entry):
    return ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")


def env_refs(c, container, name):
    """Checks every $(VAR) in env var `name` names a variable defined before it (Kubernetes
    expands only those; any other reference stays literally "$(VAR)" in the value)."""
    env = env_list(container)
    names = [e.get("name") for e in env]
    if name not in names:
        return
    i = names.index(name)
    for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(env[i].get("value", ""))):
        c.check(
            f"{name} expands $({ref})",
            ref in names[:i],
            f"$({ref}) is not an env var defined before {name}, so it would stay literal",
        )


def downward_var(container, field):
    """Names of env vars holding downward API field `field`."""
    return {e.get("name") for e in env_list(container) if field_ref(e) == field}


def port_number(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def labels_select(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def script_assignments(script, var):
    """Right-hand sides of `VAR=...` in a shell script (export VAR=... included)."""
    return re.findall(rf"(?:^|[\s;(]){var}=(\"[^\"]*\"|'[^']*'|\S+)", script)


# ---------------------------------------------------------------- the checks


def check_kustomization(c, d, files):
    k_path = d / KUSTOMIZATION
    if not c.check("kustomization.yaml exists", k_path.is_file(), f"no {k_path}"):
        return {}
    try:
        k = yaml.safe_load(k_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        c.fail("kustomization.yaml parses", str(e))
        return {}
    resources = [str(r) for r in k.get("resources") or []]
    missing = [r for r in resources if not (d / r).exists()]
    c.check("every resource in kustomization.yaml exists", not missing, f"missing: {', '.join(missing)}")
    generated = []
    for kind in ("configMapGenerator", "secretGenerator"):
        for g in k.get(kind) or []:
            for f in list(g.get("files") or []) + list(g.get("envs") or []):
                generated.append(str(f).split("=", 1)[-1])
    missing = [f for f in generated if not (d / f).is_file()]
    c.check("every generator file in kustomization.yaml exists", not missing, f"missing: {', '.join(missing)}")
    listed = {os.path.normpath(r) for r in resources}
    unlisted = [f.name for f in files if f.name not in listed]
    c.check(
        "every manifest is listed in kustomization.yaml",
        not unlisted,
        f"not in resources: {', '.join(unlisted)} (kubectl apply -k would skip them)",
    )
    return k


def check_config_file(c, d, kust, sts_container, config_volume_map):
    """The broker's --config FILE comes from a generated (or listed) ConfigMap mounted in the
    pod; the file parses and points the brokers at an S3 object store."""
    script = shell_script(sts_container)
    m = re.search(r"--config[= ]+(\S+)", script + " " + " ".join(map(str, sts_container.get("args") or [])))
    if not c.check("the broker runs with --config FILE", m, "no --config in the container's command"):
        return
    path = m.group(1).strip("'\"")
    mounts = {vm.get("mountPath"): vm.get("name") for vm in sts_container.get("volumeMounts") or []}
    volume = mounts.get(os.path.dirname(path))
    cm_name = config_volume_map.get(volume)
    if not c.check(
        "the --config file is in a mounted ConfigMap",
        cm_name,
        f"{os.path.dirname(path)} is not the mountPath of a configMap volume",
    ):
        return
    gens = {g.get("name"): g for g in kust.get("configMapGenerator") or []}
    gen = gens.get(cm_name)
    if not c.check(
        f"ConfigMap {cm_name} comes from kustomization.yaml's configMapGenerator",
        gen,
        "no configMapGenerator of that name (a change to the file would not roll the pods)",
    ):
        return
    sources = {os.path.basename(str(f).split("=", 1)[0]): str(f).split("=", 1)[-1] for f in gen.get("files") or []}
    src = sources.get(os.path.basename(path))
    if not c.check(f"{cm_name} has the key {os.path.basename(path)}", src, f"its files: {sorted(sources)}"):
        return
    if tomllib is None:
        c.fail(f"{src} parses as TOML", "Python 3.11+ (tomllib) is needed to read it")
        return
    try:
        cfg = tomllib.loads((d / src).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        c.fail(f"{src} parses as TOML", str(e))
        return
    c.check(
        f"{src} sets an s3:// object_store",
        str(cfg.get("object_store", "")).startswith("s3://"),
        f"object_store = {cfg.get('object_store')!r} (unset: a directory on the pod's own volume)",
    )


def check_statefulset(c, objs, kust, d):
    by_kind = {}
    for _, o in objs:
        by_kind.setdefault(o.get("kind"), []).append(o)
    stss = by_kind.get("StatefulSet", [])
    if not c.check("exactly one StatefulSet", len(stss) == 1, f"found {len(stss)}"):
        return
    sts = stss[0]
    name = sts["metadata"]["name"]
    ns = sts["metadata"].get("namespace")
    spec = sts.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    pod_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}

    # Namespace: one for everything, and it exists.
    c.check("the StatefulSet has a namespace", ns, "metadata.namespace is unset")
    namespaces = {o["metadata"]["name"] for o in by_kind.get("Namespace", [])}
    c.check(f"Namespace {ns} is a manifest", ns in namespaces, f"Namespaces defined: {sorted(namespaces)}")
    stray = [
        f"{o['kind']}/{o['metadata'].get('name')}"
        for _, o in objs
        if o.get("kind") not in CLUSTER_SCOPED and o["metadata"].get("namespace") != ns
    ]
    c.check(f"every namespaced object is in {ns}", not stray, f"elsewhere: {', '.join(stray)}")

    # Pods, their start order, their service.
    replicas = spec.get("replicas", 1)
    c.check("replicas >= 3", isinstance(replicas, int) and replicas >= 3, f"replicas is {replicas} (the three voters)")
    c.check(
        "podManagementPolicy is Parallel",
        spec.get("podManagementPolicy") == "Parallel",
        f"it is {spec.get('podManagementPolicy', 'OrderedReady (default)')}: pod 0 would wait forever "
        "for pods 1 and 2, which are not created before it is ready",
    )
    c.check(
        "the StatefulSet's selector selects its pods",
        labels_select((spec.get("selector") or {}).get("matchLabels"), pod_labels),
        "spec.selector.matchLabels does not match the template's labels",
    )
    svc_name = spec.get("serviceName")
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    svc = services.get(svc_name)
    if c.check(
        "serviceName is a Service of the manifests", svc, f"serviceName {svc_name!r}; Services: {sorted(services)}"
    ):
        sspec = svc.get("spec") or {}
        c.check(
            f"Service {svc_name} is headless",
            sspec.get("clusterIP") == "None",
            f"clusterIP is {sspec.get('clusterIP', 'unset (a cluster IP is allocated)')!r}, not \"None\": "
            "pods get no DNS names of their own",
        )
        c.check(
            f"Service {svc_name} publishes not-ready addresses",
            sspec.get("publishNotReadyAddresses") is True,
            "publishNotReadyAddresses is not true: the voters cannot resolve each other before "
            "they are ready, and are ready only once they have",
        )
        c.check(
            f"Service {svc_name} selects the StatefulSet's pods",
            labels_select(sspec.get("selector"), pod_labels),
            f"selector {sspec.get('selector')} vs pod labels {pod_labels}",
        )

    containers = pod.get("containers") or []
    main = next((x for x in containers if x.get("name") == "strata"), containers[0] if containers else None)
    if not c.check("the pod has a container", main, "no containers"):
        return
    env = {e.get("name"): e for e in env_list(main)}
    script = shell_script(main)
    ports = {p.get("name"): p.get("containerPort") for p in main.get("ports") or []}
    for p in ("kafka", "raft", "admin"):
        c.check(f"container port {p} is declared", p in ports, f"ports: {ports}")
    kafka_port, raft_port, admin_port = ports.get("kafka"), ports.get("raft"), ports.get("admin")
    if svc:
        svc_targets = {port_number(main, p.get("targetPort", p.get("port"))) for p in svc["spec"].get("ports") or []}
        missing = [p for p in (kafka_port, raft_port, admin_port) if p not in svc_targets]
        c.check(f"Service {svc_name} exposes the kafka, raft and admin ports", not missing, f"missing: {missing}")

    # $(VAR) references resolve.
    for var in env:
        env_refs(c, main, var)
    pod_name_vars = downward_var(main, "metadata.name")
    ns_vars = downward_var(main, "metadata.namespace")
    ns_forms = {ns} | {f"$({v})" for v in ns_vars}

    # Node id = pod ordinal.
    nid = env.get("STRATA_NODE_ID")
    from_label = nid is not None and field_ref(nid) == POD_INDEX_FIELD
    script_sets = script_assignments(script, "STRATA_NODE_ID")
    from_name = bool(script_sets) and all("##*-}" in rhs for rhs in script_sets)
    # Either the env var is the pod-index label (and the script, if it sets the id at all,
    # falls back to the pod name's ordinal), or there is no env var and the script derives it.
    c.check(
        "node id = pod ordinal",
        (from_label and (not script_sets or from_name)) or (nid is None and from_name),
        f"STRATA_NODE_ID must come from {POD_INDEX_FIELD} (env) or the ordinal of the pod name "
        f"(${{POD_NAME##*-}} in the script); env: {nid}, script assignments: {script_sets}",
    )

    # Voters: pods 0..2 by their stable names on the raft port.
    voters = str((env.get("STRATA_VOTERS") or {}).get("value", ""))
    if c.check("STRATA_VOTERS is set", voters, "no STRATA_VOTERS value in the container's env"):
        entries = [v.strip() for v in voters.split(",") if v.strip()]
        parsed = []
        for e in entries:
            m = re.fullmatch(r"(\d+)@(.+):(\d+)", e)
            if not c.check(f"voter {e!r} is id@host:port", m, "malformed"):
                continue
            parsed.append((int(m.group(1)), m.group(2), int(m.group(3))))
        ids = [p[0] for p in parsed]
        c.check("the voters are exactly nodes 0, 1, 2", ids == [0, 1, 2], f"voter ids {ids}")
        for i, host, port in parsed:
            want = [f"{name}-{i}.{svc_name}.{n}.{CLUSTER_DOMAIN}" for n in sorted(ns_forms)]
            c.check(
                f"voter {i} is pod {name}-{i} on the headless service",
                host in want,
                f"host {host!r}, expected one of {want}",
            )
            c.check(f"voter {i} is on the raft port", port == raft_port, f"port {port}, raft port {raft_port}")
        if isinstance(replicas, int):
            c.check("every voter is a pod", all(i < replicas for i in ids), f"replicas {replicas}, voters {ids}")

    # The raft listener binds the port the voters name, on an address other pods reach.
    raft_env = (env.get("STRATA_RAFT_ADDR") or {}).get("value")
    raft_sets = script_assignments(script, "STRATA_RAFT_ADDR") + ([raft_env] if raft_env else [])
    if c.check("the raft address is set", raft_sets, "STRATA_RAFT_ADDR is neither in env nor in the script"):
        bad = [r for r in raft_sets if not r.strip("'\"").endswith(f":{raft_port}")]
        c.check("the raft address binds the raft port", not bad, f"{bad} do not end in :{raft_port}")
        loop = [r for r in raft_sets if "127.0.0.1" in r or "localhost" in r]
        c.check("the raft address is not loopback", not loop, f"{loop}")
    # Every pod is known to the quorum by its stable name, so a learner re-created with a new
    # IP is still reached (and a voter's name is its voters entry).
    advertised_raft = str((env.get("STRATA_ADVERTISED_RAFT_ADDR") or {}).get("value", ""))
    want_raft = [f"$(POD_NAME).{svc_name}.{n}.{CLUSTER_DOMAIN}:{raft_port}" for n in sorted(ns_forms)]
    c.check(
        "the raft address advertised is the pod's name on the headless service",
        advertised_raft in want_raft,
        f"STRATA_ADVERTISED_RAFT_ADDR={advertised_raft!r}, expected one of {want_raft}",
    )

    # Listeners and what is advertised.
    listeners = str((env.get("STRATA_LISTENERS") or {}).get("value", ""))
    lmap = dict(re.findall(r"([A-Za-z0-9_-]+)://[^,]*?:(\d+)", listeners))
    if c.check("STRATA_LISTENERS is set", lmap, f"STRATA_LISTENERS={listeners!r}"):
        c.check(
            "a listener binds the kafka port",
            str(kafka_port) in lmap.values(),
            f"listeners {listeners!r}, kafka port {kafka_port}",
        )
    adv = str((env.get("STRATA_ADVERTISED_LISTENERS") or {}).get("value", ""))
    adv_entries = re.findall(r"([A-Za-z0-9_-]+)://([^,]+):(\d+)", adv)
    if c.check(
        "advertised listeners use POD_NAME from the downward API",
        adv_entries and pod_name_vars and all(any(f"$({v})" in h for v in pod_name_vars) for _, h, _ in adv_entries),
        f"STRATA_ADVERTISED_LISTENERS={adv!r}; env vars from metadata.name: {sorted(pod_name_vars)}",
    ):
        for lname, host, port in adv_entries:
            want = [f"$({v}).{svc_name}.{n}.{CLUSTER_DOMAIN}" for v in sorted(pod_name_vars) for n in sorted(ns_forms)]
            c.check(f"listener {lname} advertises the pod's DNS name", host in want, f"{host!r} not in {want}")
            c.check(
                f"listener {lname} advertises its own port",
                lmap.get(lname) == port,
                f"advertised {port}, bound {lmap.get(lname)}",
            )
    c.check(
        "the image's STRATA_ADVERTISED_KAFKA_ADDR is unset (empty)",
        "STRATA_ADVERTISED_KAFKA_ADDR" in env and env["STRATA_ADVERTISED_KAFKA_ADDR"].get("value", "") == "",
        "the image sets 127.0.0.1:9092, which the broker refuses together with listeners",
    )
    admin_addr = str((env.get("STRATA_ADMIN_ADDR") or {}).get("value", ""))
    c.check(
        "the admin port listens beyond loopback",
        admin_addr.endswith(f":{admin_port}") and not admin_addr.startswith(("127.", "localhost", "[::1]")),
        f"STRATA_ADMIN_ADDR={admin_addr!r}: the kubelet probes the pod IP on {admin_port}",
    )

    # The broker is PID 1 so SIGTERM (the controlled shutdown) reaches it.
    if script:
        lines = [l.strip() for l in script.strip().splitlines() if l.strip() and not l.strip().startswith("#")]
        c.check(
            "the wrapper execs strata serve",
            lines and re.match(r"exec\s+strata\s+serve\b", lines[-1]),
            f"last line {lines[-1] if lines else ''!r}: without exec the shell gets SIGTERM and strata never does",
        )

    # Rack = the node's zone, through the init container and the API server.
    rack_m = re.search(r"STRATA_RACK=\"?\$\(cat\s+([^)\s\"]+)\)", script)
    if c.check("STRATA_RACK comes from a file", rack_m, "no STRATA_RACK=\"$(cat FILE)\" in the script"):
        rack_file = rack_m.group(1)
        main_mounts = {vm.get("mountPath"): vm.get("name") for vm in main.get("volumeMounts") or []}
        vol = main_mounts.get(os.path.dirname(rack_file))
        writers = []
        for ic in pod.get("initContainers") or []:
            mounts = {vm.get("mountPath"): vm.get("name") for vm in ic.get("volumeMounts") or []}
            s = shell_script(ic)
            if vol and mounts.get(os.path.dirname(rack_file)) == vol and rack_file in s:
                writers.append(ic)
        if c.check(
            "an init container writes the rack file into a shared volume", writers, f"{rack_file} (volume {vol})"
        ):
            ic = writers[0]
            s = shell_script(ic)
            c.check(
                "the rack init container reads topology.kubernetes.io/zone",
                "topology\\.kubernetes\\.io/zone" in s or "topology.kubernetes.io/zone" in s,
                "the zone label is not in its script",
            )
            c.check(
                "the rack init container knows its node",
                any(field_ref(e) == "spec.nodeName" and f"${e.get('name')}" in s for e in env_list(ic)),
                "no env var from spec.nodeName used by its script",
            )
    sa = pod.get("serviceAccountName")
    sas = {o["metadata"]["name"] for o in by_kind.get("ServiceAccount", []) if o["metadata"].get("namespace") == ns}
    c.check(f"ServiceAccount {sa} is a manifest", sa in sas, f"serviceAccountName {sa!r}; defined: {sorted(sas)}")
    roles = {r["metadata"]["name"]: r for r in by_kind.get("ClusterRole", [])}
    grants = False
    for b in by_kind.get("ClusterRoleBinding", []):
        subj = any(
            s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace") == ns
            for s in b.get("subjects") or []
        )
        role = roles.get((b.get("roleRef") or {}).get("name"))
        if subj and role:
            for rule in role.get("rules") or []:
                if (
                    "" in (rule.get("apiGroups") or [])
                    and "nodes" in (rule.get("resources") or [])
                    and "get" in (rule.get("verbs") or [])
                ):
                    grants = True
    c.check(f"{ns}/{sa} may get nodes (ClusterRoleBinding)", grants, "no ClusterRoleBinding grants get on nodes")

    # Probes on the admin port.
    def probe(kind, path):
        p = main.get(kind) or {}
        g = p.get("httpGet") or {}
        ok = g.get("path") == path and port_number(main, g.get("port")) == admin_port
        c.check(f"{kind} is GET {path} on the admin port", ok, f"{kind}: {p or 'missing'}")
        return p

    probe("readinessProbe", "/readyz")
    probe("livenessProbe", "/healthz")
    sp = main.get("startupProbe") or {}
    sg = sp.get("httpGet") or {}
    window = sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)
    c.check(
        "startupProbe is a generous GET on the admin port",
        sg.get("path") in ("/healthz", "/readyz") and port_number(main, sg.get("port")) == admin_port and window >= 600,
        f"{sp or 'missing'}: allow >= 600 s for the quorum to form and the logs to recover",
    )

    # Shutdown, user, data, config.
    grace = pod.get("terminationGracePeriodSeconds", 30)
    c.check(
        "terminationGracePeriodSeconds >= 120",
        grace >= 120,
        f"it is {grace}: SIGKILL would cut the controlled shutdown short",
    )
    psc = pod.get("securityContext") or {}
    c.check("pods run as non-root", psc.get("runAsNonRoot") is True, f"securityContext {psc}")
    c.check(
        f"fsGroup is the image's group {IMAGE_GID}",
        psc.get("fsGroup") == IMAGE_GID,
        f"fsGroup {psc.get('fsGroup')}: the data volume must be writable by uid 10001",
    )
    data_dir = str((env.get("STRATA_DATA_DIR") or {}).get("value", "/var/lib/strata"))
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}
    mounted = {vm.get("mountPath"): vm.get("name") for vm in main.get("volumeMounts") or []}
    c.check(
        "the data dir is a volumeClaimTemplate",
        mounted.get(data_dir) in claims,
        f"{data_dir} is mounted from {mounted.get(data_dir)!r}; claims: {sorted(claims)}",
    )
    config_volumes = {v.get("name"): (v.get("configMap") or {}).get("name") for v in pod.get("volumes") or [] if v.get("configMap")}
    check_config_file(c, d, kust, main, config_volumes)

    # Disruptions: one broker at a time.
    pdbs = by_kind.get("PodDisruptionBudget", [])
    if c.check("exactly one PodDisruptionBudget", len(pdbs) == 1, f"found {len(pdbs)}"):
        pdb = pdbs[0]
        ps = pdb.get("spec") or {}
        sel = ps.get("selector") or {}
        c.check(
            "the PodDisruptionBudget selects the StatefulSet's pods",
            labels_select(sel.get("matchLabels"), pod_labels) and not sel.get("matchExpressions"),
            f"selector {sel} vs pod labels {pod_labels}",
        )
        c.check(
            "the PodDisruptionBudget has maxUnavailable 1",
            ps.get("maxUnavailable") == 1 and "minAvailable" not in ps,
            f"spec {ps}",
        )

    # Clients bootstrap through a ClusterIP Service on the Kafka port.
    boot = [
        s
        for s in services.values()
        if (s.get("spec") or {}).get("clusterIP") != "None"
        and labels_select((s.get("spec") or {}).get("selector"), pod_labels)
        and any(port_number(main, p.get("targetPort", p.get("port"))) == kafka_port for p in s["spec"].get("ports") or [])
    ]
    c.check("a ClusterIP Service bootstraps clients on the kafka port", boot, "none selects the pods on the kafka port")
    return sts


def check_render(c, d, versions, kubectl):
    """kubectl kustomize DIR, validated; the StatefulSet names the generated ConfigMap."""
    proc = subprocess.run([kubectl, "kustomize", str(d)], capture_output=True, text=True)
    if not c.check("kubectl kustomize renders", proc.returncode == 0, proc.stderr.strip()[-500:]):
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rendered.yaml"
        out.write_text(proc.stdout, encoding="utf-8")
        validate(c, [out], versions, "kustomize render")
        docs = load_yaml_docs(out)
    cms = {o["metadata"]["name"] for o in docs if o.get("kind") == "ConfigMap"}
    refs = set()
    for o in docs:
        if o.get("kind") == "StatefulSet":
            for v in o["spec"]["template"]["spec"].get("volumes") or []:
                if v.get("configMap"):
                    refs.add(v["configMap"]["name"])
    c.check(
        "the rendered StatefulSet mounts the generated ConfigMap",
        refs and refs <= cms,
        f"references {sorted(refs)}, ConfigMaps {sorted(cms)}",
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help="the manifests (default: deploy/kubernetes)")
    ap.add_argument(
        "-k",
        "--kubernetes-version",
        action="append",
        dest="versions",
        help=f"validate against this Kubernetes version (repeatable; default {', '.join(DEFAULT_VERSIONS)})",
    )
    ap.add_argument("--no-render", action="store_true", help="skip the kubectl kustomize render even with kubectl")
    args = ap.parse_args()
    d = Path(args.dir)
    versions = args.versions or DEFAULT_VERSIONS
    if not d.is_dir():
        sys.exit(f"check-kubernetes: {d} is not a directory")

    c = Checks()
    files = manifest_files(d)
    c.check("there are manifests", files, f"no .yaml files in {d}")
    objs = []
    for f in files:
        try:
            docs = load_yaml_docs(f)
        except yaml.YAMLError as e:
            c.fail(f"{f.name} parses as YAML", str(e).replace("\n", " "))
            continue
        for o in docs:
            if c.check(
                f"{f.name}: a Kubernetes object",
                isinstance(o, dict) and o.get("kind") and (o.get("metadata") or {}).get("name"),
                "a document without kind or metadata.name",
            ):
                objs.append((f, o))

    kust = check_kustomization(c, d, files)
    if files:
        validate(c, files, versions, "manifests")
    kubectl = shutil.which("kubectl")
    if args.no_render:
        render_note = "kustomize render skipped (--no-render)"
    elif kubectl:
        check_render(c, d, versions, kubectl)
        render_note = "kustomize render checked"
    else:
        render_note = "kustomize render not checked (no kubectl on PATH)"
    check_statefulset(c, objs, kust, d)

    if c.failures:
        for f in c.failures:
            print(f"FAIL {f}", file=sys.stderr)
        print(
            f"check-kubernetes: {len(c.failures)} of {c.count} checks failed in {d}",
            file=sys.stderr,
        )
        return 1
    print(
        f"validated with kubernetes-validate --strict against Kubernetes {', '.join(versions)}"
        + f"; {render_note}"
    )
    print(f"ok: {len(files)} manifests, {c.count} invariants")
    return 0


if __name__ == "__main__":
    sys.exit(main())
