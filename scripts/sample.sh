#!/usr/bin/env bash
# The agent's main job, read-only: `check` then `plan`. On a machine with RDMA
# devices, run as root, it looks at the live host; otherwise at the bundled sample
# node (a V100-like training node). Changes nothing, needs no root for the sample.
set -uo pipefail
cd "$(dirname "$0")/.."

root=tests/fixtures/nodes/v100
if [ "$(id -u)" = 0 ] && [ -n "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
    root=/
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-node-agent/target}"
cargo build --quiet --release || exit 1
bin="$CARGO_TARGET_DIR/release/rdma-node-agent"

echo "== rdma-node-agent --root $root check"
"$bin" --root "$root" check
echo "(exit code $?: 0 ok, 1 a check failed, 2 could not tell)"
echo
echo "== rdma-node-agent --root $root plan"
"$bin" --root "$root" plan
