#!/usr/bin/env python3
"""A rolling upgrade and a rollback of a secured three-node cluster, from the previous release's
binary to this one, under writes, a DELETE and an ERASE with a deadline (deploy/upgrade-test.sh
builds the binaries and runs this).

1. Three nodes on the previous binary (deploy/local-cluster.sh: TLS, mutual TLS, a password).
2. A writer sends batches through the running nodes for the whole run; a batch counts as
   acknowledged when the server answers 204. `DELETE FROM up WHERE host = 'h1'` and
   `ERASE WHERE host = 'h2' DEADLINE '3m'` run on the previous binary.
3. Nodes 3, 2, 1 are stopped (SIGTERM) and started on this binary one at a time; after each, every
   acknowledged row is read back and no deleted or erased row is.
4. Before the last node moves, ALTER CLUSTER FINALIZE UPGRADE is refused, naming it. Once all run
   this binary, system.cluster says the upgrade is pending; node 2 is rolled back to the previous
   binary and forward again, with the checks.
5. ALTER CLUSTER FINALIZE UPGRADE: every node at the new cluster version. The previous binary
   started on node 2's data is refused by its peers (it never takes part), and node 2 comes back
   on this binary.
6. The erasure persisted on every replica before its deadline, and `ebb audit verify` passes.

Environment: EBB_PREV_BIN, EBB_CUR_BIN (the two binaries), EBB_UPGRADE_DIR (a scratch directory),
EBB_PORT_BASE (default 7400).
"""

import base64
import csv
import io
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREV = os.environ["EBB_PREV_BIN"]
CUR = os.environ["EBB_CUR_BIN"]
WORK = os.environ["EBB_UPGRADE_DIR"]
BASE = int(os.environ.get("EBB_PORT_BASE", "7400"))
CLUSTER = os.path.join(WORK, "cluster")
HOSTS = 8
DELETED, ERASED = "h1", "h2"


def log(msg):
    print(f"[upgrade {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    for i in (1, 2, 3):
        path = os.path.join(CLUSTER, f"n{i}.log")
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                tail = f.readlines()[-15:]
            log(f"--- n{i}.log ---\n" + "".join(tail))
    local("stop", check=False)
    sys.exit(1)


def local(*args, binary=CUR, check=True):
    env = dict(os.environ, EBB_BIN=binary, EBB_CLUSTER_DIR=CLUSTER, EBB_PORT_BASE=str(BASE))
    r = subprocess.run([os.path.join(ROOT, "deploy", "local-cluster.sh"), *args], env=env,
                       capture_output=True, text=True)
    if check and r.returncode != 0:
        fail(f"local-cluster.sh {' '.join(args)}: {r.stdout}{r.stderr}")
    return r


class Client:
    def __init__(self):
        self.ctx = ssl.create_default_context(cafile=os.path.join(CLUSTER, "certs", "ca.crt"))
        with open(os.path.join(CLUSTER, "admin.pw")) as f:
            pw = f.read().strip()
        self.auth = "Basic " + base64.b64encode(f"admin:{pw}".encode()).decode()

    def post(self, node, path, body, accept="text/csv", timeout=10):
        req = urllib.request.Request(
            f"https://127.0.0.1:{BASE + node}{path}", data=body.encode(), method="POST",
            headers={"Authorization": self.auth, "Accept": accept})
        with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
            return r.status, r.read().decode()

    def sql(self, node, q):
        """The rows of q on node, as dicts; raises with the server's message on an error."""
        try:
            _, text = self.post(node, "/v1/sql?db=up", q)
        except urllib.error.HTTPError as e:
            raise RuntimeError(e.read().decode(errors="replace")) from None
        return list(csv.DictReader(io.StringIO(text)))


class Writer(threading.Thread):
    """Writes a batch of one row per host every 20 ms through the running nodes; keeps the
    timestamps of acknowledged batches (and of batches whose fate is unknown)."""

    def __init__(self, client):
        super().__init__(daemon=True)
        self.client = client
        self.acked, self.unknown = [], []
        self.nodes = {1, 2, 3}
        self.skip = set()  # hosts no longer written (deleted, erased)
        self.stop_ = threading.Event()
        self.lock = threading.Lock()
        self.ts = 1_700_000_000

    def run(self):
        turn = 0
        while not self.stop_.is_set():
            # Held for the whole write: a host dropped (before its DELETE) is in no write
            # still on its way.
            with self.lock:
                nodes = sorted(self.nodes)
                hosts = [f"h{h}" for h in range(HOSTS) if f"h{h}" not in self.skip]
                self.ts += 1
                ts = self.ts
                node = nodes[turn % len(nodes)]
                turn += 1
                self.write(node, ts, hosts)
            time.sleep(0.02)

    def write(self, node, ts, hosts):
        body = "".join(f"up,host={h} v={ts}i {ts}\n" for h in hosts)
        try:
            status, _ = self.client.post(node, "/write?db=up&precision=s", body, timeout=5)
            (self.acked if status == 204 else self.unknown).append((ts, tuple(hosts)))
        except urllib.error.HTTPError as e:
            if e.code >= 500 or e.code == 429:
                self.unknown.append((ts, tuple(hosts)))  # may have been written
            else:
                fail(f"write refused with {e.code}: {e.read().decode(errors='replace')}")
        except (urllib.error.URLError, OSError, TimeoutError):
            self.unknown.append((ts, tuple(hosts)))

    def pause_node(self, i, on):
        with self.lock:
            (self.nodes.discard if not on else self.nodes.add)(i)

    def drop_host(self, h):
        with self.lock:
            self.skip.add(h)
            return self.ts


def check(client, writer, node, deleted_through):
    """Every acknowledged row is there (but for deleted and erased hosts), none of those is."""
    with writer.lock:
        acked = list(writer.acked)
    want = {}
    for ts, hosts in acked:
        for h in hosts:
            if h not in (DELETED, ERASED):
                want.setdefault(h, set()).add(ts)
    deadline = time.time() + 60
    while True:
        try:
            rows = client.sql(node, "SELECT host, v FROM up")
            break
        except Exception as e:  # a node just started may not serve yet
            if time.time() > deadline:
                fail(f"node {node} does not answer queries: {e}")
            time.sleep(0.5)
    have = {}
    for r in rows:
        have.setdefault(r["host"], set()).add(int(r["v"]))
    for h in (DELETED, ERASED):
        back = {ts for ts in have.get(h, set()) if ts <= deleted_through[h]}
        if back:
            fail(f"node {node}: {len(back)} rows of {h} deleted before came back")
    missing = {h: sorted(want[h] - have.get(h, set()))[:5] for h in want if want[h] - have.get(h, set())}
    if missing:
        fail(f"node {node}: acknowledged rows missing, e.g. {missing}")
    n = sum(len(v) for v in want.values())
    log(f"node {node}: all {n} acknowledged rows read back, none of the deleted or erased ones")


def binary_of(client, node):
    rows = client.sql(node, "SELECT id, version, cluster_versions FROM system.nodes ORDER BY id")
    return [(r["id"], r["version"], r["cluster_versions"]) for r in rows]


def wait_ready(client, i, timeout=180):
    """Waits until node i's /ready answers 200 (its replicas caught up), as a rolling upgrade
    waits before it moves the next node."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            req = urllib.request.Request(f"https://127.0.0.1:{BASE + i}/ready")
            with urllib.request.urlopen(req, context=client.ctx, timeout=3) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    fail(f"node {i} not ready within {timeout} s")


def move(client, writer, i, binary, name, deleted_through):
    writer.pause_node(i, False)
    local("stop-node", str(i))
    local("start", str(i), binary=binary)
    wait_ready(client, i)
    writer.pause_node(i, True)
    log(f"node {i} runs {name}")
    for node in (1, 2, 3):
        check(client, writer, node, deleted_through)


def main():
    prev_v = subprocess.run([PREV, "--version"], capture_output=True, text=True).stdout.strip()
    cur_v = subprocess.run([CUR, "--version"], capture_output=True, text=True).stdout.strip()
    log(f"from {prev_v} to {cur_v}")
    os.makedirs(WORK, exist_ok=True)
    local("3", binary=PREV)
    client = Client()
    for i in (1, 2, 3):
        wait_ready(client, i)
    writer = Writer(client)
    writer.start()
    time.sleep(2)
    deleted_through = {}
    # A DELETE and an ERASE with a deadline, on the previous binary.
    deleted_through[DELETED] = writer.drop_host(DELETED)
    client.sql(1, f"DELETE FROM up WHERE host = '{DELETED}'")
    deleted_through[ERASED] = writer.drop_host(ERASED)
    env = dict(os.environ, EBB_URL=f"https://127.0.0.1:{BASE + 2}", EBB_USER="admin",
               EBB_CA_CERT=os.path.join(CLUSTER, "certs", "ca.crt"))
    with open(os.path.join(CLUSTER, "admin.pw")) as f:
        env["EBB_PASSWORD"] = f.read().strip()
    r = subprocess.run([CUR, "erase", "--db", "up", "--tag", f"host={ERASED}", "--deadline", "3m"],
                       env=env, capture_output=True, text=True)
    m = re.search(r"erasure id (\d+)", r.stdout)
    if r.returncode != 0 or not m:
        fail(f"ebb erase: {r.stdout}{r.stderr}")
    erasure = m.group(1)
    log(f"deleted {DELETED}, erased {ERASED} (erasure {erasure}, deadline 3m)")
    time.sleep(1)
    for node in (1, 2, 3):
        check(client, writer, node, deleted_through)

    # The rolling upgrade, highest node first (as a StatefulSet rolls).
    move(client, writer, 3, CUR, "this build", deleted_through)
    move(client, writer, 2, CUR, "this build", deleted_through)
    try:
        client.sql(2, "ALTER CLUSTER FINALIZE UPGRADE")
        fail("finalized while node 1 runs the previous binary")
    except RuntimeError as e:
        if "nothing to finalize at cluster version 1" not in str(e) and "runs an older release" not in str(e):
            fail(f"finalize refused for the wrong reason: {e}")
        log(f"finalize refused while node 1 runs the previous binary: {e}")
    move(client, writer, 1, CUR, "this build", deleted_through)
    client.sql(1, "ALTER CLUSTER SET AUTO FINALIZE NEVER")
    status = client.sql(3, "SELECT active_version, finalizable_to, upgrade FROM system.cluster")[0]
    if status["active_version"] != "1" or status["finalizable_to"] != "2":
        fail(f"after the upgrade, before finalizing: {status}")
    log(f"system.cluster: {status['upgrade']}")
    log(f"system.nodes: {binary_of(client, 3)}")

    # A rollback of one node before finalizing, and forward again.
    move(client, writer, 2, PREV, "the previous binary again (rollback)", deleted_through)
    move(client, writer, 2, CUR, "this build again", deleted_through)

    out = client.sql(1, "ALTER CLUSTER FINALIZE UPGRADE")[0]
    log(f"finalize: {out['upgrade']}")
    for node in (1, 2, 3):
        deadline = time.time() + 30
        while client.sql(node, "SELECT active_version FROM system.cluster")[0]["active_version"] != "2":
            if time.time() > deadline:
                fail(f"node {node} does not run at cluster version 2")
            time.sleep(0.5)
    log("every node runs at cluster version 2")

    # The previous binary on node 2's data after finalizing: its peers do not answer it.
    writer.pause_node(2, False)
    local("stop-node", "2")
    local("launch", "2", binary=PREV)
    time.sleep(5)
    refused = 0
    for i in (1, 3):
        with open(os.path.join(CLUSTER, f"n{i}.log"), errors="replace") as f:
            refused += sum("cluster versions 1-1" in line for line in f)
    if refused == 0:
        fail("no node refused the previous binary after finalizing")
    log(f"the previous binary on node 2 was refused {refused} times by its peers")
    check(client, writer, 1, deleted_through)
    local("stop-node", "2")
    local("start", "2", binary=CUR)
    wait_ready(client, 2)
    writer.pause_node(2, True)
    time.sleep(2)
    writer.stop_.set()
    writer.join()
    for node in (1, 2, 3):
        check(client, writer, node, deleted_through)

    # The erasure: persisted everywhere before its deadline, and verified.
    deadline = time.time() + 200
    while True:
        rows = client.sql(1, f"SELECT status, deadline, persisted_at FROM system.deletions WHERE id = {erasure}")
        if rows and all(r["status"] == "persisted" for r in rows):
            late = [r for r in rows if not r["persisted_at"] or r["persisted_at"] > r["deadline"]]
            if late:
                fail(f"erasure {erasure} persisted after its deadline: {late}")
            break
        if time.time() > deadline or any(r["status"] == "late" for r in rows):
            fail(f"erasure {erasure} not persisted in time: {rows}")
        time.sleep(2)
    log(f"erasure {erasure} persisted on {len(rows)} replicas, each before its deadline")
    env["EBB_URL"] = f"https://127.0.0.1:{BASE + 1}"
    r = subprocess.run([CUR, "audit", "verify", erasure], env=env, capture_output=True, text=True)
    if r.returncode != 0 or "PASS" not in r.stdout:
        fail(f"ebb audit verify {erasure}: {r.stdout}{r.stderr}")
    log(r.stdout.strip().splitlines()[-1])
    log(f"acknowledged batches {len(writer.acked)}, unknown {len(writer.unknown)}")
    local("stop")
    log("PASS")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: fail("terminated"))
    main()
