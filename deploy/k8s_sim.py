#!/usr/bin/env python3
"""Runs the Helm chart's StatefulSet as local processes, the way Kubernetes would run the pods.

`deploy/k8s-sim.sh` starts this inside new user, mount and network namespaces, so that:
- each pod gets its own loopback address (127.0.10.<ordinal + 1>) and binds its ports there
  (in Kubernetes each pod has its own IP; the rendered config binds 0.0.0.0);
- the pods' DNS names on the headless Service resolve through a private /etc/hosts;
- nothing is reachable from, or collides with, the host's network.

Each pod runs the real `ebb` binary with the container args and environment rendered by
`helm template`, the ConfigMap mounted as a file, and a directory per PersistentVolumeClaim.
The chart runs secured as the README tells users to run it: an admin password Secret, HTTPS
and PostgreSQL TLS, and mutual TLS between the nodes, with certificates made by `ebb cert`
standing in for the Secrets (mounted as files, as the kubelet would).
The simulation then does what an operator would: install with 3 replicas, write, `helm upgrade
--set replicas=6` (new pods start together and the cluster rebalances onto them while writes
continue), split two shards so the new nodes have shards to lead (`ALTER CLUSTER SPLIT SHARD`),
decommission the two highest pods and `helm upgrade --set replicas=4` once they have drained,
delete a pod (SIGKILL; the StatefulSet controller recreates it on the same volume), stop and
start every pod, and checks each time that no acknowledged row is lost or read twice and every
node holds its share of shard replicas. Then backups: the chart's backup CronJob (its rendered
`ebb backup create` and `ebb backup prune` containers, through the client Service) runs under
writes and once more at rest, into the backups claim (a directory bind-mounted at /mnt); a
DELETE issued after the sets were taken must reach every set (`system.deletions`); then every
pod and volume is lost, and the newest set is restored as the chart README says (`ebb restore`
into the first pod's new volume) and the release installed again on it: every row of the set
is back but the deleted ones.
"""

import argparse
import base64
import contextlib
import itertools
import json
import os
import pathlib
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import yaml

NAMESPACE = "sim"
RELEASE = "ebb"
ADMIN_PASSWORD = "sim admin password"
SECURED = [
    "--set", "auth.existingSecret=ebb-admin",
    "--set", "tls.existingSecret=ebb-tls",
    "--set", "tls.clusterSecret=ebb-cluster-tls",
    "--set", "cluster.joinToken.existingSecret=ebb-join",
    # Backups to a directory in a ReadWriteMany claim (simulated at /mnt), two sets kept.
    "--set", "backup.enabled=true",
    "--set", "backup.existingClaim=ebb-backups",
    "--set", "backup.mountPath=/mnt",
    "--set", "backup.to=/mnt/sets",
    "--set", "backup.keep=2",
]
# The client Service's name (it routes to a ready pod; the simulation sends it to pod 0).
CLIENT_SERVICE = f"{RELEASE}.{NAMESPACE}.svc.cluster.local"


def log(msg):
    print(f"[k8s-sim {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    log(f"FAILED: {msg}")
    sys.exit(1)


def render(helm, chart, replicas, out, sets=()):
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(
        [helm, "template", RELEASE, chart, "--namespace", NAMESPACE, "--set", f"replicas={replicas}",
         *SECURED, *sets, "--output-dir", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    docs = []
    for p in sorted(pathlib.Path(out).rglob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(p.read_text()) if d)
    return docs


def expand(value, env):
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


class Pod:
    def __init__(self, sim, ordinal):
        self.sim = sim
        self.ordinal = ordinal
        self.name = f"{sim.sts_name}-{ordinal}"
        self.ip = f"127.0.10.{ordinal + 1}"
        self.pvc = sim.work / "pvc" / f"data-{self.name}"
        self.proc = None
        # The pod template it runs (its revision), and whether the Service sends it writes.
        self.template = None
        self.up = False
        # Held by a write in flight to it: a pod is stopped only once none is.
        self.gate = threading.Lock()

    def url(self):
        return f"https://{self.ip}:{self.sim.ports['http']}"

    def start(self):
        self.pvc.mkdir(parents=True, exist_ok=True)
        self.template = self.sim.sts["spec"]["template"]
        spec = self.template["spec"]
        (c,) = [c for c in spec["containers"] if c["name"] == "ebb"]
        binary, image_env = self.sim.image(c["image"])
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[e["name"]] = self.name
        # Secrets as the kubelet mounts them: one directory per volume.
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            secret = volumes.get(m["name"], {}).get("secret")
            if secret:
                local = str(self.sim.secret_dir(secret["secretName"]))
                env = {k: v.replace(m["mountPath"] + "/", local + "/") for k, v in env.items()}
        args = [expand(a, env) for a in c["args"]]
        args = [a.replace("/etc/ebb/", str(self.sim.config_dir) + "/") for a in args]
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("EBB_")}
        run_env.update(env)
        # The pod's own IP instead of 0.0.0.0, and its volume.
        run_env["EBB_HTTP_ADDR"] = f"{self.ip}:{self.sim.ports['http']}"
        run_env["EBB_PG_ADDR"] = f"{self.ip}:{self.sim.ports['postgres']}"
        run_env["EBB_GRPC_ADDR"] = f"{self.ip}:{self.sim.ports['grpc']}"
        run_env["EBB_FLIGHT_ADDR"] = f"{self.ip}:{self.sim.ports['flight']}"
        run_env["EBB_DATA_DIR"] = str(self.pvc)
        run_env.setdefault("EBB_LOG", "info")
        run_env.update(image_env)
        logf = open(self.sim.work / f"{self.name}.log", "ab")
        self.proc = subprocess.Popen([binary, *args], env=run_env, stdout=logf, stderr=logf)
        log(f"pod {self.name} started ({self.ip}, volume {self.pvc.name}, image {c['image']})")

    def wait_ready(self, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                fail(f"pod {self.name} exited with {self.proc.returncode}; see {self.name}.log")
            try:
                with urllib.request.urlopen(self.url() + "/ready", timeout=2, context=self.sim.tls) as r:
                    if r.status == 200:
                        log(f"pod {self.name} ready")
                        self.up = True
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        fail(f"pod {self.name} not ready within {timeout} s")

    def unready(self):
        """What /ready answers when the pod is not ready ('' if it is, or does not answer)."""
        try:
            with urllib.request.urlopen(self.url() + "/ready", timeout=2, context=self.sim.tls):
                return ""
        except urllib.error.HTTPError as e:
            return e.read().decode(errors="replace")
        except (urllib.error.URLError, OSError):
            return ""

    def drain(self):
        """The Service stops sending it requests; returns once none is in flight."""
        self.up = False
        with self.gate:
            pass

    def kill(self):
        self.up = False
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        log(f"pod {self.name} deleted (SIGKILL)")

    def stop(self):
        self.up = False
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Sim:
    def __init__(self, args):
        self.ebb = args.ebb
        # The image tags the simulation knows: this build, and the previous release (its own
        # binary, or this one pinned to the previous release's cluster versions).
        self.images = {"current": (args.ebb, {})}
        if args.ebb_prev:
            self.images["previous"] = (args.ebb_prev, {})
        else:
            self.images["previous"] = (args.ebb, {"EBB_TEST_CLUSTER_VERSIONS": "1-1"})
        self.helm = args.helm
        self.chart = args.chart
        self.work = pathlib.Path(args.work)
        self.pods = []
        self.written = 0
        self.lock = threading.Lock()
        self.make_secrets()

    def make_secrets(self):
        """The Secrets the chart is installed with: the admin password, and certificates."""
        certs = self.work / "certs"
        if not (certs / "ca.crt").exists():
            subprocess.run([self.ebb, "cert", "ca", "--dir", str(certs)], check=True,
                           stdout=subprocess.DEVNULL)
            hosts = [a for i in range(16) for a in ("--host", f"127.0.10.{i + 1}")]
            hosts += ["--host", CLIENT_SERVICE]
            subprocess.run([self.ebb, "cert", "issue", "node", "--dir", str(certs), *hosts],
                           check=True, stdout=subprocess.DEVNULL)
        files = {
            "ebb-admin": {"admin-password": ADMIN_PASSWORD.encode()},
            "ebb-tls": {"tls.crt": (certs / "node.crt").read_bytes(),
                        "tls.key": (certs / "node.key").read_bytes(),
                        "ca.crt": (certs / "ca.crt").read_bytes()},
            "ebb-join": {"join-token": base64.b64encode(os.urandom(32))},
            "ebb-cluster-tls": {"ca.crt": (certs / "ca.crt").read_bytes(),
                                "tls.crt": (certs / "node.crt").read_bytes(),
                                "tls.key": (certs / "node.key").read_bytes()},
        }
        for name, items in files.items():
            d = self.secret_dir(name)
            d.mkdir(parents=True, exist_ok=True)
            for key, data in items.items():
                (d / key).write_bytes(data)
                (d / key).chmod(0o600)
        self.tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        pair = base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
        self.auth = {"Authorization": f"Basic {pair}"}

    def secret_dir(self, name):
        return self.work / "secrets" / name

    def image(self, ref):
        """The binary and extra environment of image `ref` (`repository:tag`)."""
        tag = ref.rsplit(":", 1)[-1]
        if tag not in self.images:
            fail(f"no binary for image {ref}")
        return self.images[tag]

    def apply(self, replicas, tag="current", partition=0):
        """helm install/upgrade: renders, checks the manifests, and reconciles the pods: new
        pods start together; a changed pod template rolls the pods at or above `partition` one
        at a time, highest first, each stopped, started on the new template and ready before
        the next (the StatefulSet controller's RollingUpdate)."""
        sets = ["--set", f"image.tag={tag}", "--set", f"updatePartition={partition}"]
        docs = render(self.helm, self.chart, replicas, self.work / f"rendered-{replicas}", sets)
        (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
        (self.cronjob,) = [d for d in docs if d["kind"] == "CronJob"]
        # The server's configuration (the chart also ships the Grafana dashboard's ConfigMap).
        (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "config.toml" in d.get("data", {})]
        (headless,) = [
            d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"
        ]
        if not headless["spec"].get("publishNotReadyAddresses"):
            fail("the headless Service does not publish starting pods")
        if sts["spec"].get("podManagementPolicy") != "Parallel":
            fail("pods do not start together (a full restart needs a quorum before any is ready)")
        old_template = getattr(self, "sts", None)
        self.sts = sts
        self.sts_name = sts["metadata"]["name"]
        (c,) = sts["spec"]["template"]["spec"]["containers"]
        self.ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.config_dir = self.work / "configmap"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        for key, text in cm["data"].items():
            (self.config_dir / key).write_text(text)
        self.write_hosts(max(replicas, len(self.pods)))
        if old_template is not None:
            old = json.loads(json.dumps(old_template["spec"]["template"]))
            new = json.loads(json.dumps(sts["spec"]["template"]))
            old["spec"]["containers"][0]["image"] = new["spec"]["containers"][0]["image"]
            if old != new:
                fail("the upgrade changed the pod template beyond the image")
        want = sts["spec"]["updateStrategy"].get("rollingUpdate", {}).get("partition", 0)
        if want != partition:
            fail(f"updatePartition={partition} rendered as partition {want}")
        for pod in reversed(self.pods[partition:]):
            if pod.template != sts["spec"]["template"]:
                pod.drain()
                pod.stop()
                log(f"pod {pod.name} stopped for the rolling update")
                pod.start()
                pod.wait_ready()
        # Parallel: the new pods start together; the install or scale-up is done once all are
        # ready.
        new = []
        while len(self.pods) < replicas:
            pod = Pod(self, len(self.pods))
            pod.start()
            self.pods.append(pod)
            new.append(pod)
        for pod in new:
            pod.wait_ready()

    def write_hosts(self, n):
        headless = f"{self.sts_name}-peers"
        lines = ["127.0.0.1 localhost", f"127.0.10.1 {CLIENT_SERVICE}"]
        for i in range(n):
            lines.append(
                f"127.0.10.{i + 1} {self.sts_name}-{i}.{headless}.{NAMESPACE}.svc.cluster.local "
                f"{self.sts_name}-{i}.{headless}"
            )
        pathlib.Path("/etc/hosts").write_text("\n".join(lines) + "\n")

    def run_job(self, container):
        """Runs one container of the backup CronJob's pod as Kubernetes would: its args, its
        environment (Secrets read from their files), its mounts."""
        spec = self.cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (c,) = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == container]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EBB_")}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "secretKeyRef" in e.get("valueFrom", {}):
                ref = e["valueFrom"]["secretKeyRef"]
                path = self.secret_dir(ref["name"]) / ref["key"]
                if path.exists():
                    env[e["name"]] = path.read_text()
                elif not ref.get("optional"):
                    fail(f"the backup job needs Secret {ref['name']} key {ref['key']}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            secret = volumes.get(m["name"], {}).get("secret")
            if secret:
                local = str(self.secret_dir(secret["secretName"]))
                env = {k: v.replace(m["mountPath"] + "/", local + "/") for k, v in env.items()}
        out = subprocess.run([self.ebb, *c["args"]], env=env, capture_output=True, text=True,
                             timeout=600)
        if out.returncode != 0:
            fail(f"backup job container {container} exited {out.returncode}: {out.stderr}")
        return out.stdout

    def backup_job(self):
        """One run of the backup CronJob: `ebb backup create`, then the prune."""
        self.run_job("backup")
        self.run_job("prune")
        return [r["id"] for r in self.sql(self.pods[0], "SELECT id FROM system.backups WHERE state = 'done' ORDER BY id")]

    def sql(self, pod, query):
        req = urllib.request.Request(
            pod.url() + "/v1/sql?db=public", data=query.encode(), method="POST",
            headers={"Accept": "application/json", **self.auth},
        )
        with urllib.request.urlopen(req, timeout=30, context=self.tls) as r:
            return json.loads(r.read())

    def write(self, pod, batch):
        lines = "".join(
            f"cpu,host=h{(batch * 7 + i) % 50} usage={i}.5 {1_700_000_000_000_000_000 + batch * 1000 + i}\n"
            for i in range(500)
        )
        req = urllib.request.Request(
            pod.url() + "/write?db=public", data=lines.encode(), method="POST", headers=self.auth
        )
        with pod.gate:
            if not pod.up:
                return False  # the Service no longer sends it requests
            with urllib.request.urlopen(req, timeout=30, context=self.tls) as r:
                if r.status != 204:
                    raise RuntimeError(f"write answered {r.status}")
            with self.lock:
                self.written += 500
        return True

    def check_counts(self, when):
        """Every pod reads every acknowledged row, once."""
        for p in self.pods:
            n = self.count(p)
            if n != self.written:
                fail(f"{when} {p.name} reads {n} rows, {self.written} were acknowledged")

    def count(self, pod):
        return self.sql(pod, "SELECT count(*) AS n FROM cpu")[0]["n"]

    def shards(self, pod):
        return self.sql(
            pod, "SELECT shard, replicas, moving, split, leader FROM system.shards ORDER BY shard"
        )

    def wait_balanced(self, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                rows = self.shards(self.pods[0])
                nodes = self.sql(
                    self.pods[0], "SELECT id, replicas FROM system.nodes WHERE state = 'active'"
                )
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.5)
                continue
            total = sum(len(r["replicas"].split(",")) for r in rows)
            share = total // len(self.pods)
            if (
                not any(r["moving"] or r.get("split") for r in rows)
                and len(nodes) == len(self.pods)
                and all(n["replicas"] >= share for n in nodes)
            ):
                log(f"balanced: {[(n['id'], n['replicas']) for n in nodes]}")
                return
            time.sleep(0.5)
        fail(f"shards did not rebalance within {timeout} s: {rows} {nodes}")


def wait_until(check, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if check():
                return
        except (urllib.error.URLError, OSError, ValueError, IndexError, KeyError):
            pass
        time.sleep(0.5)
    fail(f"timed out waiting for {what}")


def settled(sim, n):
    """True once the cluster has n shards, each with a leader, none moving or mid-split."""
    rows = sim.shards(sim.pods[0])
    return len(rows) == n and all(
        r.get("leader") is not None and not r["moving"] and r.get("split") is None for r in rows
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebb", required=True)
    ap.add_argument("--ebb-prev", help="the previous release's binary (default: --ebb pinned "
                    "to the previous release's cluster versions)")
    ap.add_argument("--helm", required=True)
    ap.add_argument("--chart", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--from-replicas", type=int, default=3)
    ap.add_argument("--to-replicas", type=int, default=6)
    ap.add_argument("--down-to", type=int, default=4)
    a = ap.parse_args()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    sim = Sim(a)
    try:
        log(f"helm install --set replicas={a.from_replicas} --set image.tag=previous")
        sim.apply(a.from_replicas, tag="previous")
        for b in range(20):
            sim.write(sim.pods[b % len(sim.pods)], b)
        if sim.count(sim.pods[-1]) != sim.written:
            fail(f"{sim.count(sim.pods[-1])} rows readable, {sim.written} written")
        ids = {p.name: (p.pvc / "node_id").read_text().strip() for p in sim.pods}
        log(f"{sim.written} rows written; node ids {ids}")
        if len({(p.pvc / "cluster_id").read_text() for p in sim.pods}) != 1:
            fail("the pods do not share one cluster id")
        try:
            urllib.request.urlopen(sim.pods[0].url() + "/v1/sql?db=public", data=b"SELECT 1",
                                   timeout=10, context=sim.tls)
            fail("SQL without credentials was answered")
        except urllib.error.HTTPError as e:
            if e.code != 401:
                fail(f"SQL without credentials answered {e.code}, not 401")

        # Scale out while a writer keeps going.
        stop = threading.Event()
        errors = []

        # Batch numbers go on across the writers of every phase: each batch's rows are new.
        batches = itertools.count(1000)

        def writer():
            while not stop.is_set():
                b = next(batches)
                # The client Service sends requests to ready pods only.
                serving = [p for p in sim.pods[: a.from_replicas] if p.up]
                if not serving:
                    time.sleep(0.1)
                    continue
                try:
                    sim.write(serving[b % len(serving)], b)
                except Exception as e:  # noqa: BLE001 - any failure is reported below
                    errors.append(repr(e))

        @contextlib.contextmanager
        def writing(what):
            """A writer runs meanwhile; then no write may have failed and every pod reads every
            acknowledged row once."""
            stop.clear()
            t = threading.Thread(target=writer, daemon=True)
            t.start()
            try:
                yield
            finally:
                stop.set()
                t.join()
            if errors:
                fail(f"writes failed during {what}: {errors[:3]}")
            sim.check_counts(f"after {what}")

        # A rolling upgrade from the previous release under writes, a rollback of one pod before
        # finalizing, and the finalization.
        with writing("the rolling upgrade"):
            log("helm upgrade --set image.tag=current")
            sim.apply(a.from_replicas, tag="current")
        cluster = "SELECT active_version, finalizable_to, upgrade FROM system.cluster"
        st = sim.sql(sim.pods[0], cluster)[0]
        if st["active_version"] != 1 or st.get("finalizable_to") != 2:
            fail(f"after the rolling upgrade, before finalizing: {st}")
        log(f"rolling upgrade done: {st['upgrade']}")
        with writing("the rollback of one pod"):
            log("helm upgrade --set image.tag=previous --set updatePartition=2")
            sim.apply(a.from_replicas, tag="previous", partition=2)
            st = sim.sql(sim.pods[0], cluster)[0]
            if st["active_version"] != 1 or st.get("finalizable_to") is not None:
                fail(f"with one pod rolled back: {st}")
            log(f"pod 2 back on the previous release: {st['upgrade']}")
            try:
                sim.sql(sim.pods[1], "ALTER CLUSTER FINALIZE UPGRADE")
                fail("finalized with a pod on the previous release")
            except urllib.error.HTTPError as e:
                log(f"finalize refused: {e.read().decode(errors='replace')[:200]}")
            log("helm upgrade --set image.tag=current")
            sim.apply(a.from_replicas, tag="current")
        out = sim.sql(sim.pods[2], "ALTER CLUSTER FINALIZE UPGRADE")[0]
        log(f"ALTER CLUSTER FINALIZE UPGRADE: {out['upgrade']}")
        for p in sim.pods:
            wait_until(lambda p=p: sim.sql(p, cluster)[0]["active_version"] == 2, 60,
                       f"{p.name} to run at cluster version 2")
        versions = sim.sql(sim.pods[0], "SELECT id, version, cluster_versions FROM system.nodes")
        log(f"finalized: every pod at cluster version 2; nodes {versions}")
        # Joining now takes a token. A cluster the previous release created has none: mint one
        # and put it in the Secret, as the chart's README says.
        tokens = sim.sql(sim.pods[0], "SELECT id FROM system.join_tokens")
        if not any(t["id"] == "bootstrap" for t in tokens):
            out = sim.sql(sim.pods[1], "CREATE JOIN TOKEN VALID FOR '1d' USES UNLIMITED")[0]
            path = sim.secret_dir("ebb-join") / "join-token"
            path.write_text(out["token"])
            log(f"minted join token {out['id']} into the Secret")
        else:
            log("the cluster's pods join with the Secret's token (registered at install)")

        with writing("scale-out"):
            log(f"helm upgrade --set replicas={a.to_replicas}")
            sim.apply(a.to_replicas)
            sim.wait_balanced()
        log(f"scale-out {a.from_replicas} -> {a.to_replicas}: {sim.written} rows on every pod")

        # More shards for the new nodes to lead: two splits, under writes.
        before = len(sim.shards(sim.pods[0]))
        with writing("the splits"):
            for shard in (1, 2):
                out = sim.sql(sim.pods[-1], f"ALTER CLUSTER SPLIT SHARD {shard}")
                log(f"ALTER CLUSTER SPLIT SHARD {shard}: new shard {out[0]['new_shard']}")
                n = before + 1
                wait_until(lambda: settled(sim, n), 180, f"the split of shard {shard}")
                before += 1
            sim.wait_balanced()
        log(f"splits: {before} shards; {sim.written} rows on every pod")

        # Scale in: the highest pods are decommissioned, drained, then removed.
        with writing("scale-in"):
            leaving = sim.pods[a.down_to:]
            leaving_ids = [int((p.pvc / "node_id").read_text()) for p in leaving]
            for node in leaving_ids:
                req = urllib.request.Request(
                    sim.pods[0].url() + f"/v1/cluster/decommission?node={node}", data=b"",
                    method="POST", headers=sim.auth,
                )
                with urllib.request.urlopen(req, timeout=30, context=sim.tls) as r:
                    if r.status >= 300:
                        fail(f"decommission of node {node} answered {r.status}")
            log(f"decommissioning nodes {leaving_ids}")
            gone = ", ".join(str(i) for i in leaving_ids)
            wait_until(
                lambda: all(
                    r["state"] == "removed"
                    for r in sim.sql(sim.pods[0], f"SELECT state FROM system.nodes WHERE id IN ({gone})")
                ),
                300,
                "the decommissioned nodes to drain and leave",
            )
            # A pod that has left says so on /ready (503), as the readiness probe sees it, and
            # refuses writes, so the Service sends it nothing more.
            for p in leaving:
                wait_until(lambda p=p: "has left the cluster" in p.unready(), 60, f"{p.name} to report it left")
                with contextlib.suppress(urllib.error.HTTPError):
                    req = urllib.request.Request(
                        p.url() + "/write?db=public", data=b"cpu,host=x v=1", method="POST", headers=sim.auth
                    )
                    with urllib.request.urlopen(req, timeout=10, context=sim.tls):
                        fail(f"{p.name} took a write after it left the cluster")
            log("the decommissioned pods report they left and refuse writes")
            log(f"helm upgrade --set replicas={a.down_to}")
            for p in leaving:
                p.stop()
            sim.pods = sim.pods[: a.down_to]
            sim.apply(a.down_to)
            sim.wait_balanced()
        log(f"scale-in {a.to_replicas} -> {a.down_to}: {sim.written} rows on every pod")

        # Pod deletion: the controller recreates it on the same volume; it keeps its id.
        victim = sim.pods[1]
        victim.kill()
        for b in range(5):
            sim.write(sim.pods[0], next(batches))
        victim.start()
        victim.wait_ready()
        if (victim.pvc / "node_id").read_text().strip() != ids[victim.name]:
            fail(f"{victim.name} came back with another node id")
        sim.wait_balanced()
        sim.check_counts("after the pod deletion")
        log(f"pod deletion: {victim.name} rejoined as node {ids[victim.name]}; {sim.written} rows")

        # The whole StatefulSet goes down at once (a node pool drained, a power cut) and
        # comes back together: every pod keeps its id, the cluster converges, nothing is lost.
        for p in sim.pods:
            p.kill()
        for p in sim.pods:
            p.start()
        for p in sim.pods:
            p.wait_ready()
            if (p.pvc / "node_id").read_text().strip() != ids.get(p.name, (p.pvc / "node_id").read_text().strip()):
                fail(f"{p.name} came back with another node id")
        sim.check_counts("after the full restart")
        sim.write(sim.pods[-1], next(batches))
        log(f"full restart: {len(sim.pods)} pods ready again with their ids; {sim.written} rows")

        # Pod 0 loses its volume while pods 1 and 2 (its other seeds) are paused: it must not
        # create a cluster of its own, however long they stay silent; once they resume it joins
        # theirs under a new id.
        cluster_id = (sim.pods[1].pvc / "cluster_id").read_text()
        first = sim.pods[0]
        old_id = (first.pvc / "node_id").read_text().strip()
        first.kill()
        shutil.rmtree(first.pvc)
        for p in sim.pods[1:3]:
            p.up = False
            p.proc.send_signal(signal.SIGSTOP)
        log("pod 0's volume lost; pods 1 and 2 paused (SIGSTOP)")
        first.start()
        time.sleep(30)
        if first.proc.poll() is not None:
            fail(f"pod 0 exited while its seeds were paused ({first.proc.returncode})")
        if (first.pvc / "node_id").exists():
            fail("pod 0 created a cluster of its own while its seeds were paused")
        for p in sim.pods[1:3]:
            p.proc.send_signal(signal.SIGCONT)
            p.up = True
        log("30 s later pod 0 still waits for its seeds; pods 1 and 2 resumed")
        first.wait_ready()
        if (first.pvc / "cluster_id").read_text() != cluster_id:
            fail("pod 0 came back in another cluster")
        new_id = (first.pvc / "node_id").read_text().strip()
        if new_id == old_id:
            fail("pod 0 took over its lost node id")
        ids[first.name] = new_id
        sim.wait_balanced()
        sim.check_counts("after pod 0 rejoined without its volume")
        log(f"pod 0 joined the cluster as node {new_id} (was {old_id}); {sim.written} rows")

        # Backups: the chart's CronJob under writes, then at rest (its prune keeps two sets).
        with writing("the backup under writes"):
            sets = sim.backup_job()
        log(f"backup CronJob under writes: sets {sets}")
        sets = sim.backup_job()
        if len(sets) != 2:
            fail(f"the CronJob's prune keeps 2 sets; the destination lists {sets}")
        newest, at_rest = sets[-1], sim.written
        log(f"backup CronJob at rest: sets {sets}, {at_rest} rows in {newest}")
        # Personal data erased after both sets were taken must leave both.
        h3 = sim.sql(sim.pods[0], "SELECT count(*) AS n FROM cpu WHERE host = 'h3'")[0]["n"]
        erasure = sim.sql(sim.pods[-1], "ERASE WHERE host = 'h3'")[0]["erasure_id"]

        def reached_sets():
            rows = sim.sql(
                sim.pods[0],
                f"SELECT copy, replica_status AS s FROM system.deletions WHERE id = {erasure} "
                "AND copy <> 'replica'",
            )
            held = {r["copy"] for r in rows}
            return len(held) >= 2 and all(r["s"] == "persisted" for r in rows)

        wait_until(reached_sets, 300, f"erasure {erasure} to reach both backup sets")
        log(f"ERASE of {h3} rows (request {erasure}) reached both sets")

        # Every pod and every volume is lost. The chart README's restore: `ebb restore` into
        # the first pod's new volume, what it wrote moved to the volume's root, then the release
        # installed again.
        for p in sim.pods:
            p.kill()
        (sim.work / "pvc").rename(sim.work / "pvc-lost")
        sim.pods = []
        first = sim.work / "pvc" / f"data-{sim.sts_name}-0"
        first.mkdir(parents=True)
        out = subprocess.run(
            [sim.ebb, "restore", "--quiet", "--from", "/mnt/sets", "--backup", newest,
             "--data-dir", str(first / "new")],
            capture_output=True, text=True, timeout=600,
        )
        if out.returncode != 0:
            fail(f"ebb restore exited {out.returncode}: {out.stderr}")
        for x in (first / "new").iterdir():
            x.rename(first / x.name)
        (first / "new").rmdir()
        log(f"restored set {newest} into {first.name}")
        sim.written = at_rest - h3
        log(f"helm install --set replicas={a.from_replicas} on the restored volume")
        sim.apply(a.from_replicas)
        sim.wait_balanced()
        sim.check_counts("after the restore")
        left = sim.sql(sim.pods[-1], "SELECT count(*) AS n FROM cpu WHERE host = 'h3'")[0]["n"]
        if left != 0:
            fail(f"the restored cluster serves {left} erased rows")
        sim.write(sim.pods[-1], next(batches))
        sim.check_counts("after a write to the restored cluster")
        log(f"restore: {len(sim.pods)} pods, {sim.written} rows, none of the erased")
        log("PASSED")
    finally:
        for p in sim.pods:
            p.stop()


if __name__ == "__main__":
    main()
