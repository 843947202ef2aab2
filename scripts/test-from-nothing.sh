#!/usr/bin/env bash
# Runs the whole suite as a fresh machine would: a fresh clone of HEAD, with
# every cache the suite keeps moved aside (the build, tool, image and artefact
# caches under /var/cache/rdma-node-agent, and cargo's download cache), then put
# back. Debian packages already installed stay installed: removing them would
# touch the rest of the machine.
#
#   sudo scripts/test-from-nothing.sh [LOG]
#
# Prints the suite's phase table and its wall time; the whole output goes to LOG
# (default /var/tmp/rdma-node-agent-from-nothing.log). Exits as the suite does.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
log=${1:-/var/tmp/rdma-node-agent-from-nothing.log}
[ "$(id -u)" = 0 ] || { echo "test-from-nothing.sh needs root, as scripts/test.sh does" >&2; exit 1; }
[ -d "$repo/../shared" ] || { echo "test-from-nothing.sh: no ../shared beside $repo (CI has one)" >&2; exit 1; }

stamp=$(date +%Y%m%d-%H%M%S)
cargo_home=${CARGO_HOME:-$HOME/.cargo}
# What the suite caches; each is moved aside whole (a rename: no copy).
caches=(/var/cache/rdma-node-agent "$cargo_home/registry" "$cargo_home/git")
moved=()
restore() {
    local c
    for c in "${moved[@]}"; do
        rm -rf "$c"
        mv "$c.aside-$stamp" "$c"
        echo "test-from-nothing: restored $c" >&2
    done
    [ -z "${work:-}" ] || rm -rf "$work"
}
trap restore EXIT
for c in "${caches[@]}"; do
    if [ -e "$c" ]; then
        mv "$c" "$c.aside-$stamp"
        moved+=("$c")
        echo "test-from-nothing: moved $c aside to $c.aside-$stamp" >&2
    fi
done

# A fresh clone with ../shared beside it, as CI lays it out (read-only there).
work=$(mktemp -d /var/tmp/rdma-from-nothing.XXXXXX)
git clone -q "$repo" "$work/main"
ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
start=$(date +%s)
rc=0
(cd "$work/main" && CI=true bash .ci/run </dev/null) >"$log" 2>&1 || rc=$?
took=$(($(date +%s) - start))
sed -n '/^phase timings/,$p' "$log"
echo "test-from-nothing: exit $rc after $((took / 60)) min $((took % 60)) s (log: $log)"
exit "$rc"
