#!/usr/bin/env bash
# A rolling upgrade and a rollback, from the previous release to this tree, on a secured
# three-node cluster under writes, a DELETE and an ERASE with a deadline (deploy/upgrade_test.py
# says what it checks).
#
#   deploy/upgrade-test.sh [--from REF] [--prev-bin PATH] [--cur-bin PATH]
#
# --from REF: the previous release (default: the newest tag v* below this version, else the
# newest release in deploy/releases.txt below it); its binary is built from a git worktree,
# sharing this tree's target directory (only EbbDB's own crates are built again). --prev-bin and
# --cur-bin take binaries already built (EBB_PREV_BIN, EBB_CUR_BIN alike); without --cur-bin,
# `cargo build -p ebb-node --bin ebb` builds this tree's. EBB_PORT_BASE (default 7400) places the
# ports; the work directory is kept on failure (EBB_UPGRADE_DIR, default a temporary one).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
from=${EBB_PREV_REF:-}
prev=${EBB_PREV_BIN:-}
cur=${EBB_CUR_BIN:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    --from) from=$2; shift 2 ;;
    --prev-bin) prev=$2; shift 2 ;;
    --cur-bin) cur=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { echo "[upgrade-test $(date +%T)] $*"; }
work=${EBB_UPGRADE_DIR:-$(mktemp -d /tmp/ebb-upgrade.XXXXXX)}
mkdir -p "$work"
target=${CARGO_TARGET_DIR:-$root/target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)

# The newest release below this version: a tag, else the list of releases (a clone without tags).
older() { python3 -c '
import sys
cur = tuple(int(x) for x in sys.argv[1].split("."))
best = None
for line in sys.stdin:
    v, ref = line.split()[:2]
    t = tuple(int(x) for x in v.lstrip("v").split("."))
    if t < cur and (best is None or t > best[0]):
        best = (t, ref)
print(best[1] if best else "")' "$version"; }

if [[ -z $prev ]]; then
  if [[ -z $from ]]; then
    from=$(git -C "$root" tag --list 'v*' | awk '{print $1, $1}' | older)
    [[ -n $from ]] || from=$(grep -v '^#' "$root/deploy/releases.txt" | older)
  fi
  [[ -n $from ]] || { echo "no previous release below $version: give --from REF" >&2; exit 1; }
  commit=$(git -C "$root" rev-parse --verify "$from^{commit}")
  log "building the previous release $from ($commit)"
  rm -rf "$work/prev-src"
  git -C "$root" worktree add --detach "$work/prev-src" "$commit" >/dev/null
  trap 'git -C "$root" worktree remove --force "$work/prev-src" 2>/dev/null; git -C "$root" worktree prune' EXIT
  (cd "$work/prev-src" && CARGO_TARGET_DIR=$target cargo build -p ebb-node --bin ebb)
  cp "$target/debug/ebb" "$work/ebb-prev"
  prev=$work/ebb-prev
fi
if [[ -z $cur ]]; then
  log "building this tree"
  (cd "$root" && cargo build -p ebb-node --bin ebb)
  cp "$target/debug/ebb" "$work/ebb-cur"
  cur=$work/ebb-cur
fi
log "previous: $("$prev" --version); this: $("$cur" --version)"
EBB_PREV_BIN=$prev EBB_CUR_BIN=$cur EBB_UPGRADE_DIR=$work python3 "$root/deploy/upgrade_test.py"
[[ -n ${EBB_UPGRADE_DIR:-} ]] || rm -rf "$work"
