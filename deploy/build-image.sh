#!/usr/bin/env bash
# Builds the EbbDB container image on this machine without pulling anything from a registry:
# `FROM scratch` holding the `ebb` binary, the shared libraries it links (taken from this
# machine's Debian packages by `ldd`), tini, CA certificates, a passwd entry for user `ebb`
# (uid 10001) and the default configuration (`deploy/docker/config.toml`). It is the image
# `deploy/Dockerfile` describes, for machines that cannot pull `rust` and `debian` images.
#
#   deploy/build-image.sh [--profile dist|release|dev | --bin PATH] [--tag ebbdb/ebb:0.2.0] [--check]
#
# --profile: the cargo profile (default dist: thin LTO, about 44 minutes from a clean target
#   on 2 cores; release builds in minutes). --bin: an `ebb` binary already built, put in the image
#   as it is (CI checks the image with the debug binary its tests built: a build of the binary
#   alone would resolve dependency features without the tests' and compile much of the tree
#   again). --check: runs the image with podman and checks /health, a line-protocol write and a
#   SQL query through it, then removes the container.
# Needs podman (Debian: apt install podman buildah runc uidmap tini) and a build machine of the
# same glibc as the image's users (Debian 12 here).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=dist
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag="ebbdb/ebb:${version}"
check=false
strict=true
bin=
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --check) check=true; shift ;;
    # As --check, but a host where no container can start at all (no namespaces, no cgroups)
    # only builds the image: CI on an unknown sandbox.
    --check-if-runnable) check=true; strict=false; shift ;;
    *) echo "usage: $0 [--profile dist|release|dev | --bin PATH] [--tag NAME:TAG] [--check]" >&2; exit 2 ;;
  esac
done
step() { echo "[build-image $(date +%T)] $*" >&2; }
command -v podman >/dev/null || { echo "podman is needed (apt install podman buildah runc uidmap)" >&2; exit 1; }
tini=$(command -v tini-static || true)
[ -n "$tini" ] || { echo "tini-static is needed (apt install tini)" >&2; exit 1; }
# A storage driver that works without kernel overlay support (containers, CI sandboxes), and
# runc, which runs on hosts with cgroup v1 or hybrid hierarchies where crun does not.
podman=(podman --storage-driver "${EBB_PODMAN_STORAGE:-vfs}")
runtime=(--runtime "${EBB_PODMAN_RUNTIME:-runc}")

if [ -n "$bin" ]; then
  [ -x "$bin" ] || { echo "no executable at $bin" >&2; exit 1; }
  step "taking the binary $bin"
else
  step "building ebb (profile $profile)"
  cargo build --locked --profile "$profile" --workspace --bin ebb
  case $profile in dev | test) dir=debug ;; *) dir=$profile ;; esac
  bin=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/$dir/ebb
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
step "assembling the root file system in $root"
install -D -m 0755 "$bin" "$root/usr/local/bin/ebb"
strip "$root/usr/local/bin/ebb"
install -D -m 0755 "$tini" "$root/usr/bin/tini"
# The binary's shared libraries and the dynamic loader, at the paths it was linked against.
ldd "$bin" | awk '/=> \// {print $3} /^[[:space:]]*\/lib/ {print $1}' | sort -u | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
[ -f /etc/ssl/certs/ca-certificates.crt ] &&
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
install -D -m 0644 deploy/docker/config.toml "$root/etc/ebb/config.toml"
mkdir -p "$root/tmp" "$work/data"
chmod 1777 "$root/tmp"
chmod 0750 "$work/data"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nebb:x:10001:10001:ebb:/var/lib/ebb:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nebb:x:10001:\n' >"$root/etc/group"
# Host names resolve through /etc/hosts, then DNS (glibc 2.34+ has both in libc itself).
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"

cat >"$work/Containerfile" <<'CONTAINERFILE'
FROM scratch
COPY root/ /
COPY --chown=10001:10001 data/ /var/lib/ebb/
USER 10001:10001
WORKDIR /var/lib/ebb
VOLUME ["/var/lib/ebb"]
EXPOSE 7080 7432 7090 7091
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/ebb"]
CMD ["server", "--config", "/etc/ebb/config.toml"]
CONTAINERFILE
step "building image $tag"
"${podman[@]}" build --quiet --pull=never --tag "$tag" --file "$work/Containerfile" "$work" >/dev/null
# The image this tag named before, if any, is left untagged: remove those.
"${podman[@]}" image prune -f >/dev/null
"${podman[@]}" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$tag" >&2

if $check; then
  # Limits no higher than this shell's: raising them needs CAP_SYS_RESOURCE, which sandboxes lack.
  limits=(--ulimit "nofile=$(ulimit -Sn):$(ulimit -Sn)" --ulimit "nproc=4096:4096")
  if ! probe=$("${podman[@]}" "${runtime[@]}" run --rm --network host "${limits[@]}" "$tag" --version 2>&1); then
    if ! $strict; then
      step "containers cannot start on this host ($probe): the image is built, not run"
      exit 0
    fi
    echo "FAILED: the image does not start: $probe" >&2
    exit 1
  fi
  step "starts: $probe"
  name=ebb-image-check-$$
  base=${EBB_CHECK_PORT_BASE:-17600}
  step "running $tag as container $name (host network, ports $base-$((base + 3)), user admin)"
  # Listening on every address, as in a pod, so the server requires users: an admin password.
  password="image check $$"
  "${podman[@]}" "${runtime[@]}" run -d --name "$name" --network host "${limits[@]}" \
    -e EBB_ADMIN_PASSWORD="$password" \
    -e EBB_HTTP_ADDR="0.0.0.0:$base" -e EBB_PG_ADDR="0.0.0.0:$((base + 1))" \
    -e EBB_GRPC_ADDR="0.0.0.0:$((base + 2))" -e EBB_FLIGHT_ADDR="0.0.0.0:$((base + 3))" \
    "$tag" >/dev/null
  cleanup() { "${podman[@]}" "${runtime[@]}" rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"; }
  trap cleanup EXIT
  url="http://127.0.0.1:$base"
  for _ in $(seq 1 100); do
    curl -sf "$url/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -sf "$url/health" >/dev/null || { "${podman[@]}" logs "$name" >&2; echo "FAILED: /health" >&2; exit 1; }
  step "/health: ok"
  [ "$(curl -s -o /dev/null -w '%{http_code}' -XPOST "$url/v1/sql" --data-binary 'SELECT 1')" = 401 ] ||
    { echo "FAILED: a request without credentials was not refused" >&2; exit 1; }
  step "without credentials: 401"
  curl -sf -u "admin:$password" -XPOST "$url/write?db=public" --data-binary $'cpu,host=a usage=12.5 1700000000000000000\ncpu,host=b usage=40 1700000000000000000' ||
    { "${podman[@]}" logs "$name" >&2; echo "FAILED: write" >&2; exit 1; }
  answer=$(curl -sf -u "admin:$password" -XPOST "$url/v1/sql?db=public" --data-binary 'SELECT host, usage FROM cpu ORDER BY host')
  step "query: $answer"
  [ "$answer" = '[{"host":"a","usage":12.5},{"host":"b","usage":40.0}]' ] ||
    { echo "FAILED: unexpected answer" >&2; exit 1; }
  user=$("${podman[@]}" "${runtime[@]}" exec "$name" /usr/local/bin/ebb --version 2>/dev/null || true)
  step "in the container: ${user:-ebb}; runs as uid $("${podman[@]}" inspect --format '{{.Config.User}}' "$name")"
  step "PASSED"
fi
