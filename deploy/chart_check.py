#!/usr/bin/env python3
"""Checks a rendered EbbDB chart (a `helm template --output-dir` tree).

Every manifest of a built-in kind is validated with kubernetes-validate (offline schemas,
strict: unknown fields are errors); the ServiceMonitor (a CRD) is checked for the fields the
Prometheus Operator needs. The StatefulSet's container is then run as the kubelet would start it,
with `--check-config` added: its args, its environment (`$(VAR)` references expanded, the pod
name from the downward API) and the rendered config file; `ebb` must accept them.
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

BUILT_IN = {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy", "CronJob"}


def fail(msg):
    print(f"chart check failed: {msg}", file=sys.stderr)
    sys.exit(1)


def load(tree):
    docs = []
    for path in sorted(pathlib.Path(tree).rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path, doc))
    return docs


def expand(value, env):
    """Kubernetes' $(VAR) expansion of an env value or arg."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def check_container(sts, configmaps, ebb, pod_index=0):
    name = sts["metadata"]["name"]
    pod = f"{name}-{pod_index}"
    spec = sts["spec"]["template"]["spec"]
    (c,) = [c for c in spec["containers"] if c["name"] == "ebb"]
    for probe, path in (
        ("startupProbe", "/health"), ("livenessProbe", "/health"), ("readinessProbe", "/ready"),
    ):
        if c[probe]["httpGet"]["path"] != path:
            fail(f"{probe} checks {c[probe]['httpGet']['path']}, not {path}")
    if not spec["securityContext"].get("runAsNonRoot"):
        fail("the pod may run as root")
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = pod
        elif "secretKeyRef" in e.get("valueFrom", {}):
            # A key of a Secret (object storage credentials): a stand-in value.
            env[e["name"]] = "stand-in-secret"
        else:
            fail(f"env {e['name']}: unsupported source {e}")
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    tls_on = "tls" in mounts
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        scheme = c[probe]["httpGet"].get("scheme", "HTTP")
        if scheme != ("HTTPS" if tls_on else "HTTP"):
            fail(f"{probe} uses {scheme} while client TLS is {'on' if tls_on else 'off'}")
    with tempfile.TemporaryDirectory() as tmp:
        # Certificates for the TLS Secrets, made the way a user would (ebb cert).
        certs = pathlib.Path(tmp) / "certs"
        subprocess.run([ebb, "cert", "ca", "--dir", str(certs)], check=True, capture_output=True)
        subprocess.run([ebb, "cert", "issue", "node", "--dir", str(certs), "--host", "localhost"],
                       check=True, capture_output=True)
        pem = {"ca.crt": certs / "ca.crt", "tls.crt": certs / "node.crt", "tls.key": certs / "node.key"}
        args = [expand(a, env) for a in c.get("args", [])]
        for vname, mpath in mounts.items():
            secret = volumes.get(vname, {}).get("secret")
            if secret:
                # A Secret's keys as files holding a stand-in value.
                local = pathlib.Path(tmp) / vname
                local.mkdir()
                for item in secret.get("items", []):
                    if item["key"] in pem:
                        (local / item["path"]).write_bytes(pem[item["key"]].read_bytes())
                    else:
                        (local / item["path"]).write_text("stand-in secret\n")
                args = [a.replace(mpath, str(local)) for a in args]
                env = {k: v.replace(mpath, str(local)) for k, v in env.items()}
                continue
            cm = volumes.get(vname, {}).get("configMap")
            if not cm:
                continue
            data = configmaps.get(cm["name"])
            if data is None:
                fail(f"volume {vname} mounts missing ConfigMap {cm['name']}")
            local = pathlib.Path(tmp) / vname
            local.mkdir()
            for key, text in data.items():
                (local / key).write_text(text)
            args = [a.replace(mpath, str(local)) for a in args]
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("EBB_")}
        run_env.update(env)
        r = subprocess.run([ebb, *args, "--check-config"], env=run_env, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"ebb {' '.join(args)} --check-config: {r.stderr.strip() or r.stdout.strip()}")
        if "auth" in mounts and "an admin password creates user admin" not in r.stdout:
            fail(f"the admin password Secret does not reach the server: {r.stdout}")
        if tls_on != ("HTTPS and PostgreSQL TLS required" in r.stdout):
            fail(f"the client TLS Secret and the server disagree: {r.stdout}")
        if ("cluster-tls" in mounts) != ("cluster TLS: mutual TLS" in r.stdout):
            fail(f"the cluster TLS Secret and the server disagree: {r.stdout}")
        return r.stdout


def sts_volumes(docs):
    (sts,) = [d for _, d in docs if d["kind"] == "StatefulSet"]
    return sts["spec"]["template"]["spec"].get("volumes", [])


def sts_port(docs, name):
    (sts,) = [d for _, d in docs if d["kind"] == "StatefulSet"]
    (c,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "ebb"]
    return next(p["containerPort"] for p in c["ports"] if p["name"] == name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubernetes-validate", default="kubernetes-validate")
    ap.add_argument("--k8s-version", default="1.34.0")
    ap.add_argument("--ebb", required=True)
    ap.add_argument("tree")
    a = ap.parse_args()
    docs = load(a.tree)
    kinds = sorted({d["kind"] for _, d in docs})
    files = sorted({str(p) for p, d in docs if d["kind"] in BUILT_IN})
    r = subprocess.run(
        [a.kubernetes_validate, "--strict", "--quiet", "-k", a.k8s_version, *files],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        fail(f"kubernetes-validate: {r.stdout.strip()} {r.stderr.strip()}")
    for _, d in docs:
        if d["kind"] == "ServiceMonitor":
            eps = d["spec"].get("endpoints") or fail("ServiceMonitor without endpoints")
            if not d["spec"].get("selector", {}).get("matchLabels"):
                fail("ServiceMonitor selects nothing")
            if eps[0].get("port") != "http" or eps[0].get("path") != "/metrics":
                fail(f"ServiceMonitor scrapes {eps[0]}")
            tls_on = any(v.get("name") == "tls" for v in sts_volumes(docs))
            if (eps[0].get("scheme", "http") == "https") != tls_on:
                fail(f"ServiceMonitor scheme {eps[0].get('scheme', 'http')} while client TLS is {tls_on}")
        elif d["kind"] == "Certificate":
            spec = d["spec"]
            if not spec.get("secretName") or not spec.get("issuerRef", {}).get("name"):
                fail("Certificate without secretName or issuerRef")
            if "ebb-node" not in spec.get("dnsNames", []):
                fail("the Certificate does not name ebb-node, which nodes verify each other against")
            if set(spec.get("usages", [])) != {"server auth", "client auth"}:
                fail(f"Certificate usages {spec.get('usages')}")
        elif d["kind"] == "NetworkPolicy":
            grpc = sts_port(docs, "grpc")
            rules = [r for r in d["spec"]["ingress"] if any(p["port"] == grpc for p in r["ports"])]
            if len(rules) != 1 or not all("podSelector" in f for f in rules[0].get("from", [])) \
                    or not rules[0].get("from"):
                fail(f"the NetworkPolicy admits the gRPC port from outside the release: {rules}")
        elif d["kind"] not in BUILT_IN:
            fail(f"unexpected kind {d['kind']}")
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for _, d in docs if d["kind"] == "ConfigMap"}
    (sts,) = [d for _, d in docs if d["kind"] == "StatefulSet"]
    replicas = sts["spec"]["replicas"]
    for i in sorted({0, replicas - 1}):
        check_container(sts, configmaps, a.ebb, i)
    print(f"  {len(docs)} manifests ({', '.join(kinds)}): valid; {replicas} pod(s); config accepted")


if __name__ == "__main__":
    main()
