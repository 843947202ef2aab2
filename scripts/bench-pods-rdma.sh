#!/usr/bin/env bash
# pods.rdma at scale (issue 27, item 5): `check --only pods.rdma` on 2,000 real
# pod processes holding ~130k descriptors, beside a bare pass that only reads
# those descriptor links (the floor), with and without the kernel's RDMA
# resource tracking. This machine has no RDMA device, so the restrack figure
# is the check's own path given a FAKE netlink answer naming HOLDERS of the
# processes (labelled so in the output); the whole-process figure is the
# fallback the binary really takes here. Details: examples/bench_pods.rs.
# On demand (not in CI), as root on cgroup v1: `sudo scripts/bench-pods-rdma.sh`.
# PROCS (2000), PER_CONTAINER (2), FDS (65), RUNS (5) and HOLDERS (8) tune it.
# Times move with the machine's load: take figures for docs/performance.md on a
# quiet one.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target-release}"
cargo build --release --quiet --bin rdma-node-agent --example bench_pods
exec "$CARGO_TARGET_DIR/release/examples/bench_pods" "$CARGO_TARGET_DIR/release/rdma-node-agent" \
    "${PROCS:-2000}" "${PER_CONTAINER:-2}" "${FDS:-65}" "${RUNS:-5}" "${HOLDERS:-8}"
