#!/usr/bin/env bash
# The agent's `serve` (on the bundled V100 sample node) side by side with Debian's
# prometheus-node-exporter, both on loopback, measured in one run: startup time,
# idle RSS, wake-ups while idle, wrk throughput and latency, RSS after load.
# On demand (not in CI): `sudo scripts/bench-vs-node-exporter.sh`.
# IDLE_SECS (default 10), WAKE_SECS (30) and LOAD_SECS (10) shorten it.
set -euo pipefail
cd "$(dirname "$0")/.."

idle_secs="${IDLE_SECS:-10}"
wake_secs="${WAKE_SECS:-30}"
load_secs="${LOAD_SECS:-10}"
agent_addr=127.0.0.1:19470
ne_addr=127.0.0.1:19100

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
# The binary the packages ship (static glibc).
agent=$(bash scripts/release-build.sh)

root=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$root"
}
trap cleanup EXIT
cp -a tests/fixtures/nodes/v100/. "$root/"

now_ms() { date +%s%3N; }
wait_200() { # url -> ms until it answers 200
    local start=$(now_ms)
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ]; do sleep 0.005; done
    echo $(($(now_ms) - start))
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
switches() { # context switches of every thread of a process (each one a wake-up)
    cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'
}

start=$(now_ms)
"$agent" --root "$root" serve --listen "$agent_addr" 2>/dev/null &
pids+=($!)
agent_pid=$!
# /healthz answers once the first reconcile is done, when the unit would be READY
# (/readyz stays 503 on the fixture: its containerd predates the change).
wait_200 "http://$agent_addr/healthz" >/dev/null
agent_start=$(( $(now_ms) - start ))

start=$(now_ms)
prometheus-node-exporter --web.listen-address="$ne_addr" >/dev/null 2>&1 &
pids+=($!)
ne_pid=$!
wait_200 "http://$ne_addr/metrics" >/dev/null
ne_start=$(( $(now_ms) - start ))

sleep "$idle_secs"
agent_idle=$(rss_kb "$agent_pid")
ne_idle=$(rss_kb "$ne_pid")

a0=$(switches "$agent_pid"); n0=$(switches "$ne_pid")
sleep "$wake_secs"
agent_wake=$(( $(switches "$agent_pid") - a0 ))
ne_wake=$(( $(switches "$ne_pid") - n0 ))

bench() { # url -> "req/s p50 p99"
    wrk -t2 -c32 -d"${load_secs}s" --latency "$1" 2>/dev/null | awk '
        /Requests\/sec/ {rps = $2}
        /^ +50%/ {p50 = $2}
        /^ +99%/ {p99 = $2}
        END {print rps, p50, p99}'
}
read -r a_ready_rps a_ready_p50 a_ready_p99 < <(bench "http://$agent_addr/readyz")
read -r a_rps a_p50 a_p99 < <(bench "http://$agent_addr/metrics")
read -r n_rps n_p50 n_p99 < <(bench "http://$ne_addr/metrics")
agent_load=$(rss_kb "$agent_pid")
ne_load=$(rss_kb "$ne_pid")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
ms() { # wrk latency ("1.23ms", "850.00us", "2.1s") in milliseconds
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) {sub(/us$/, "", v); printf "%.2f", v / 1000}
        else if (v ~ /ms$/) {sub(/ms$/, "", v); printf "%.2f", v}
        else {sub(/s$/, "", v); printf "%.2f", v * 1000}
    }'
}
at_most() { if awk -v v="$1" -v t="$2" 'BEGIN {exit !(v + 0 <= t + 0)}'; then echo met; else echo "NOT met"; fi; }
at_least() { if awk -v v="$1" -v t="$2" 'BEGIN {exit !(v + 0 >= t + 0)}'; then echo met; else echo "NOT met"; fi; }

rss_ratio=$(ratio "$agent_idle" "$ne_idle")
tput_ratio=$(ratio "$a_rps" "$n_rps")
p99=$(ms "$a_p99")
echo "rdma-node-agent vs prometheus-node-exporter ($(prometheus-node-exporter --version 2>&1 | head -n1 | awk '{print $3}')), $(nproc) cores, one run"
printf '%-40s %18s %18s\n' "" "rdma-node-agent" "node_exporter"
printf '%-40s %18s %18s\n' "start to first answer (ms)" "$agent_start" "$ne_start"
printf '%-40s %18s %18s\n' "idle RSS after ${idle_secs}s (KiB)" "$agent_idle" "$ne_idle"
printf '%-40s %18s %18s\n' "wake-ups while idle, ${wake_secs}s" "$agent_wake" "$ne_wake"
printf '%-40s %18s %18s\n' "/metrics req/s (wrk -t2 -c32 ${load_secs}s)" "$a_rps" "$n_rps"
printf '%-40s %18s %18s\n' "/metrics latency p50 / p99" "$a_p50 / $a_p99" "$n_p50 / $n_p99"
printf '%-40s %18s %18s\n' "/readyz req/s, p50 / p99" "$a_ready_rps, $a_ready_p50 / $a_ready_p99" "-"
printf '%-40s %18s %18s\n' "RSS after load (KiB)" "$agent_load" "$ne_load"
echo
echo "targets: idle RSS <= 1/3 of node_exporter's: ratio $rss_ratio -> $(at_most "$rss_ratio" 0.3334)"
echo "         /metrics throughput >= 50x: ratio $tput_ratio -> $(at_least "$tput_ratio" 50)"
echo "         /metrics p99 <= 2 ms: ${p99} ms -> $(at_most "$p99" 2)"
