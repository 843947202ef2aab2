#!/usr/bin/env bash
# Issue 35 item 5: the CPU of a probe round. A probe is one run of the probe
# helper (rdma-node-agent-probe ping: RDMA-CM connect, a 64-byte and a
# path-MTU-sized SEND, each echoed); the prober's own work per probe (a fork,
# one JSON line) is small beside it. The figure comes from the peer tier's
# real Soft-RoCE run (tests/vm_peers.rs, step bench-probes: 20 probes in a row,
# bash's `time`), so it is a guest's under TCG emulation: an upper bound, many
# times a real host's.
#
#   scripts/bench-probes.sh [RESULTS_DIR]   (default: the tier's last run)
#
# Prints CPU per probe and per round for K peers × PORTS ports (K=3, PORTS=8).
set -euo pipefail
dir=${1:-/var/cache/rdma-node-agent/vm/last-peers-results}
k=${K:-3}
ports=${PORTS:-8}
f="$dir/bench-probes.err"
[ -s "$f" ] || { echo "bench-probes: no $f: run the peer tier first (cargo test --test vm_peers -- --include-ignored)" >&2; exit 1; }
read -r wall user sys < <(tail -n 1 "$f")
awk -v w="$wall" -v u="$user" -v s="$sys" -v k="$k" -v p="$ports" 'BEGIN {
    n = 20; cpu = (u + s) / n * 1000
    printf "probe (Soft-RoCE, TCG guest): %.1f ms wall, %.1f ms CPU (user %.1f, system %.1f)\n", w / n * 1000, cpu, u / n * 1000, s / n * 1000
    printf "round of %d probes (k=%d x %d ports): %.0f ms CPU; at a 60 s interval: %.3f%% of one core\n", k * p, k, p, cpu * k * p, cpu * k * p / 600
}'
