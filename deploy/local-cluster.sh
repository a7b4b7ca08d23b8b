#!/usr/bin/env bash
# Runs an EbbDB cluster on this machine: every node on loopback ports with its own data
# directory, secured as a production cluster is: user `admin` with a generated password
# ($EBB_CLUSTER_DIR/admin.pw), HTTPS and PostgreSQL TLS, and mutual TLS between the nodes, all
# with certificates `ebb cert` makes in $EBB_CLUSTER_DIR/certs (EBB_LOCAL_PLAIN=1: none of it).
#
#   deploy/local-cluster.sh N         start N nodes (the first creates the cluster)
#   deploy/local-cluster.sh add       start one more node; it joins and gets a share of shards
#   deploy/local-cluster.sh kill I    stop node I with SIGKILL (as a crash would)
#   deploy/local-cluster.sh start I   start node I again (it rejoins with its stored id)
#   deploy/local-cluster.sh launch I  start node I without waiting for it to serve
#   deploy/local-cluster.sh stop-node I  stop node I (SIGTERM), and wait until it has exited
#   deploy/local-cluster.sh stop      stop every node (SIGTERM: they shut down cleanly)
#   deploy/local-cluster.sh status    list the nodes
#
# Environment: EBB_BIN (the ebb binary; default: the newer of target/release/ebb and
# target/debug/ebb, else ebb on PATH), EBB_CLUSTER_DIR (default ./ebb-cluster), EBB_PORT_BASE (default 7100:
# node I serves HTTP on base+I, gRPC on base+100+I and PostgreSQL on base+200+I), EBB_SHARDS,
# EBB_REPLICATION, EBB_LOCAL_PLAIN.
set -euo pipefail

dir=${EBB_CLUSTER_DIR:-./ebb-cluster}
base=${EBB_PORT_BASE:-7100}
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -n ${EBB_BIN:-} ]]; then
  bin=$EBB_BIN
elif [[ -x $root/target/release/ebb && ! $root/target/debug/ebb -nt $root/target/release/ebb ]]; then
  bin=$root/target/release/ebb
elif [[ -x $root/target/debug/ebb ]]; then
  bin=$root/target/debug/ebb
else
  bin=$(command -v ebb || true)
fi
[[ -n $bin && -x $bin ]] || { echo "no ebb binary: build it (cargo build --release -p ebb-node) or set EBB_BIN" >&2; exit 1; }

plain=${EBB_LOCAL_PLAIN:-}
scheme=https
[[ -n $plain ]] && scheme=http
http() { echo "127.0.0.1:$((base + $1))"; }
grpc() { echo "127.0.0.1:$((base + 100 + $1))"; }
count() { ls -d "$dir"/n*/ 2>/dev/null | wc -l; }
# A killed node may linger as a zombie (nothing reaps it), which `kill -0` counts as alive:
# read its state from /proc instead.
running() {
  [[ -f $dir/n$1.pid ]] || return 1
  local stat
  stat=$(cat "/proc/$(cat "$dir/n$1.pid")/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

# The CA, one certificate for every node (it names 127.0.0.1 and `ebb-node`), and the admin
# password, made once.
secure() {
  [[ -n $plain ]] && return 0
  mkdir -p "$dir"
  if [[ ! -f $dir/certs/ca.crt ]]; then
    "$bin" cert ca --dir "$dir/certs" >/dev/null
    "$bin" cert issue node --dir "$dir/certs" --host 127.0.0.1 --host localhost >/dev/null
  fi
  if [[ ! -f $dir/admin.pw ]]; then
    (umask 077 && head -c 18 /dev/urandom | base64 >"$dir/admin.pw")
  fi
}

# The join token every node is given: the first registers it, the others join with it (a
# binary from before join tokens is given none).
join_args() {
  "$bin" server --help 2>/dev/null | grep -q -- --join-token-file || return 0
  if [[ ! -f $dir/join.token ]]; then
    mkdir -p "$dir"
    (umask 077 && head -c 32 /dev/urandom | base64 | tr -d '\n=' >"$dir/join.token")
  fi
  echo --join-token-file "$dir/join.token"
}

security_args() {
  [[ -n $plain ]] && return 0
  local c=$dir/certs
  echo --tls-cert "$c/node.crt" --tls-key "$c/node.key" --cluster-ca "$c/ca.crt" \
    --cluster-cert "$c/node.crt" --cluster-key "$c/node.key" --admin-password-file "$dir/admin.pw"
}

wait_ready() {
  local ca=()
  [[ -z $plain ]] && ca=(--cacert "$dir/certs/ca.crt")
  for _ in $(seq 1 300); do
    if curl -sf "${ca[@]}" "$scheme://$(http "$1")/health" >/dev/null 2>&1; then return 0; fi
    running "$1" || { echo "node $1 exited; see $dir/n$1.log" >&2; tail -5 "$dir/n$1.log" >&2; return 1; }
    sleep 0.1
  done
  echo "node $1 did not become ready; see $dir/n$1.log" >&2
  return 1
}

start_node() {
  local i=$1 wait=${2:-wait} args=()
  if running "$i"; then echo "node $i is already running"; return 0; fi
  secure
  mkdir -p "$dir/n$i"
  # shellcheck disable=SC2207
  args+=($(security_args) $(join_args))
  if [[ ! -f $dir/n$i/node_id ]]; then
    if [[ $i == 1 ]]; then
      args+=(--cluster)
    else
      args+=(--join "$(grpc 1),$(grpc $((i - 1)))")
    fi
  fi
  "$bin" server --data-dir "$dir/n$i" --http-addr "$(http "$i")" --grpc-addr "$(grpc "$i")" \
    --pg-addr "127.0.0.1:$((base + 200 + i))" --flight-addr "127.0.0.1:$((base + 300 + i))" \
    ${args[@]+"${args[@]}"} >>"$dir/n$i.log" 2>&1 &
  echo $! >"$dir/n$i.pid"
  [[ $wait == wait ]] || { echo "node $i started (pid $!)"; return 0; }
  wait_ready "$i"
  echo "node $i: HTTP $scheme://$(http "$i")  PostgreSQL 127.0.0.1:$((base + 200 + i))  Flight SQL 127.0.0.1:$((base + 300 + i))  gRPC $(grpc "$i")  data $dir/n$i  log $dir/n$i.log"
}

case ${1:-} in
  add)
    start_node $(($(count) + 1))
    ;;
  kill)
    i=${2:?node number}
    running "$i" || { echo "node $i is not running" >&2; exit 1; }
    kill -9 "$(cat "$dir/n$i.pid")"
    for _ in $(seq 1 100); do running "$i" || break; sleep 0.05; done
    echo "node $i killed"
    ;;
  start)
    start_node "${2:?node number}"
    ;;
  launch)
    start_node "${2:?node number}" nowait
    ;;
  stop-node)
    i=${2:?node number}
    running "$i" || { echo "node $i is not running"; exit 0; }
    kill "$(cat "$dir/n$i.pid")" 2>/dev/null || true
    for _ in $(seq 1 600); do running "$i" || break; sleep 0.1; done
    if running "$i"; then
      echo "node $i did not exit within 60 s of SIGTERM: killed" >&2
      kill -9 "$(cat "$dir/n$i.pid")" 2>/dev/null || true
    fi
    echo "node $i stopped"
    ;;
  stop)
    for p in "$dir"/n*.pid; do
      [[ -f $p ]] && kill "$(cat "$p")" 2>/dev/null || true
    done
    # Returns once every node has exited (a clean shutdown flushes first): a `start` right
    # after finds none still running. A node still up after 60 s is killed.
    for p in "$dir"/n*.pid; do
      [[ -f $p ]] || continue
      i=${p##*/n}; i=${i%.pid}
      for _ in $(seq 1 600); do running "$i" || break; sleep 0.1; done
      if running "$i"; then
        echo "node $i did not exit within 60 s of SIGTERM: killed" >&2
        kill -9 "$(cat "$p")" 2>/dev/null || true
      fi
    done
    echo "stopped"
    ;;
  status)
    for d in "$dir"/n*/; do
      i=${d%/}; i=${i##*/n}
      state=stopped; running "$i" && state=running
      echo "node $i: $state  HTTP $scheme://$(http "$i")  id $(cat "$d/node_id" 2>/dev/null || echo '?')"
    done
    ;;
  ''|-h|--help)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    n=$1
    [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || { echo "usage: $0 N|add|kill I|start I|launch I|stop-node I|stop|status" >&2; exit 2; }
    for i in $(seq 1 "$n"); do start_node "$i"; done
    if [[ -n $plain ]]; then
      cat <<MSG

$n nodes running, without TLS or passwords. Write and query through any of them, e.g.:
  curl -XPOST 'http://$(http 1)/write?db=demo' --data-binary 'cpu,host=a usage=0.5'
  curl -XPOST 'http://$(http "$n")/v1/sql?db=demo' -H 'Accept: text/plain' --data 'SELECT * FROM cpu'
Add a node: $0 add    Stop all: $0 stop
MSG
    else
      ca=$(cd "$dir/certs" && pwd)/ca.crt
      cat <<MSG

$n nodes running with TLS, mutual TLS between them, and user admin (password in $dir/admin.pw).
For ebb sql, ebb import, ebb erase, ebb audit:
  export EBB_URL=https://$(http 1) EBB_CA_CERT=$ca EBB_USER=admin EBB_PASSWORD="\$(cat $dir/admin.pw)"
Then, e.g.:
  curl --cacert $ca -u "admin:\$EBB_PASSWORD" -XPOST 'https://$(http 1)/write?db=demo' --data-binary 'cpu,host=a usage=0.5'
  ebb sql --db demo -c 'SELECT * FROM cpu'
  PGPASSWORD="\$EBB_PASSWORD" psql "host=127.0.0.1 port=$((base + 201)) user=admin dbname=demo sslmode=verify-full sslrootcert=$ca"
Add a node: $0 add    Stop all: $0 stop
MSG
    fi    ;;
esac
