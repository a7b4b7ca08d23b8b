#!/usr/bin/env bash
# Runs every `ebb-bench` command in its `--quick` mode, so that none breaks or drifts unseen.
# No figure is asserted: a quick run's sizes are too small to quote. A command fails the script
# when it exits with an error or prints no RESULT line.
#
#   benches/quick.sh [EBB_BENCH]     (default: target/debug/ebb-bench; `ebb` beside it)
#
# Needs RocksDB's db_bench and headers (Debian: rocksdb-tools, librocksdb-dev) and a C++
# compiler. The peers of `ingest` and `query` (InfluxDB, VictoriaMetrics, QuestDB) are not run
# here: those commands run EbbDB alone (`--peers none`). `scale` needs the cgroup `cpu`
# controller and root; where it cannot create a cgroup, it is skipped and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=$(readlink -f "${1:-${CARGO_TARGET_DIR:-target}/debug/ebb-bench}")
[ -x "$bench" ] || { echo "no $bench: cargo build -p ebb-benches -p ebb-node" >&2; exit 1; }
[ -x "$(dirname "$bench")/ebb" ] || { echo "no ebb beside $bench" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ebb-bench-quick.XXXXXX")
trap 'rm -rf "$work"' EXIT

can_limit_cpu() {
    local probe=/sys/fs/cgroup/ebb-bench-probe-$$
    if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        mkdir "$probe" 2>/dev/null && rmdir "$probe"
    else
        mkdir /sys/fs/cgroup/cpu/ebb-bench-probe-$$ 2>/dev/null &&
            rmdir /sys/fs/cgroup/cpu/ebb-bench-probe-$$
    fi
}

failed=()
run() {
    local name=$1
    shift
    local log="$work/$name.log" start=$SECONDS
    if (cd "$work" && "$bench" --quick "$@") >"$log" 2>&1 && grep -q '^RESULT ' "$log"; then
        echo "quick $name: ok in $((SECONDS - start)) s, $(grep -c '^RESULT ' "$log") RESULT lines" >&2
    else
        echo "quick $name: FAILED after $((SECONDS - start)) s; its output:" >&2
        tail -40 "$log" >&2
        failed+=("$name")
    fi
}

run engine engine
run range-delete range-delete
run deletes deletes
run range-query range-query --part filters
run range-grf range-query --part grf
run range-reduce range-query --part reduce
run server-layout server-layout
run durability durability
run security security
run ingest ingest --peers none --baseline-bin "$(dirname "$bench")/ebb"
run query query --peers none --baseline-bin "$(dirname "$bench")/ebb"
run cluster cluster
run erasure erasure
run rollup rollup
run backup backup
run moves moves
if can_limit_cpu; then
    run scale scale
else
    echo "quick scale: skipped (no cgroup cpu controller to write here)" >&2
fi

if [ ${#failed[@]} -gt 0 ]; then
    echo "quick benchmarks failed: ${failed[*]}" >&2
    exit 1
fi
