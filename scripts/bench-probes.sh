#!/usr/bin/env bash
# Issue 35 item 5: the CPU of a probe round. A probe is one run of the probe
# helper (rdma-node-agent-probe ping: RDMA-CM connect, a 64-byte and a
# path-MTU-sized SEND, each echoed); the prober's own work per probe (a fork,
# one JSON line) is small beside it. The figure comes from the peer tier's
# real Soft-RoCE run (tests/vm_peers.rs, step bench-probes: 20 probes in a row,
# bash's `time`), so it is a guest's under TCG emulation: an upper bound, many
# times a real host's.
#
#   [HELPER=path/to/rdma-node-agent-probe] scripts/bench-probes.sh [RESULTS_DIR]   (default: the tier's last run)
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
# The same 20 runs on this machine, when it has no RDMA device: the helper's
# start (loader, libraries, key) up to its first RDMA-CM call, which fails at
# once. A floor for a real host's figure, beside the TCG guest's ceiling.
helper=${HELPER:-}
if [ -n "$helper" ]; then
    key=$(mktemp)
    trap 'rm -f "$key"' EXIT
    head -c 32 /dev/urandom | base64 >"$key"
    read -r wall user sys < <( { TIMEFORMAT='%R %U %S'; time (for _ in $(seq 20); do
        "$helper" ping --src 10.0.0.1 --dst 10.0.0.2 --port 18770 --key-file "$key" --node n1 --rail 0 --timeout-ms 500 >/dev/null
    done); } 2>&1 | tail -n 1)
    awk -v u="$user" -v s="$sys" 'BEGIN { printf "helper start on this machine (no RDMA device): %.2f ms CPU per run\n", (u + s) / 20 * 1000 }'
fi
