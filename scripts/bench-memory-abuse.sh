#!/usr/bin/env bash
# Memory under hostile HTTP clients, rdma-node-agent beside Debian's
# prometheus-node-exporter, both on 127.0.0.1 only: each round holds CONNS
# connections (default 2000) to a daemon, then sends on all of them at once a
# 1 MiB header (half) or a 100 kB request line (the other half), on /metrics,
# and closes them (examples/abuse_http.rs, bounded to 30 s a round). Prints RSS
# idle, right after each round and SETTLE_SECS (60) later, per daemon.
# Standalone (`scripts/bench-memory-abuse.sh`) or from
# scripts/bench-vs-node-exporter.sh. ROUNDS (5), CONNS, IDLE_SECS (10) and
# SETTLE_SECS tune it; AGENT=PATH measures another build (e.g. an older one). Targets (issue 24): the agent back to <= 2x idle within
# 60 s of each round, and no upward trend over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-5}"
conns="${CONNS:-2000}"
idle_secs="${IDLE_SECS:-10}"
settle_secs="${SETTLE_SECS:-60}"
agent_port=19472
ne_port=19102

if ! command -v prometheus-node-exporter >/dev/null || ! command -v curl >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-node-exporter curl >/dev/null
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
# The shipped binary, and the client built the same way (it shares the build).
built=$(bash scripts/release-build.sh)
agent="${AGENT:-$built}"
target=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet --target "$target" --example abuse_http
abuse="$CARGO_TARGET_DIR/$target/release/examples/abuse_http"

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
# Both daemons raise their soft open-files limit themselves; the client needs
# CONNS descriptors.
ulimit -S -n "$(ulimit -H -n)"

wait_200() {
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ]; do sleep 0.02; done
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

cp -a tests/fixtures/nodes/v100/. "$work/"
"$agent" --root "$work" serve --listen "127.0.0.1:$agent_port" >/dev/null 2>&1 &
agent_pid=$!
pids+=("$agent_pid")
prometheus-node-exporter --web.listen-address="127.0.0.1:$ne_port" >/dev/null 2>&1 &
ne_pid=$!
pids+=("$ne_pid")
wait_200 "http://127.0.0.1:$agent_port/healthz"
wait_200 "http://127.0.0.1:$ne_port/metrics"
sleep "$idle_secs"
a_idle=$(rss_kb "$agent_pid")
n_idle=$(rss_kb "$ne_pid")

ne_version=$(prometheus-node-exporter --version 2>&1 | head -n1 | awk '{print $3}')
echo "memory under abuse: rdma-node-agent vs prometheus-node-exporter $ne_version; $(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "each round: $conns connections held, then a 1 MiB header or a 100 kB request line on each; RSS in KiB"
printf '%-6s %12s %12s %12s %12s\n' "" "agent" "" "n_e" ""
printf '%-6s %12s %12s %12s %12s\n' round "after" "+${settle_secs}s" "after" "+${settle_secs}s"
printf '%-6s %12s %12s %12s %12s\n' idle "$a_idle" "" "$n_idle" ""
settled=()
answers=()
for r in $(seq 1 "$rounds"); do
    a_out=$("$abuse" "$agent_port" "$conns")
    a_after=$(rss_kb "$agent_pid")
    n_out=$("$abuse" "$ne_port" "$conns")
    n_after=$(rss_kb "$ne_pid")
    sleep "$settle_secs"
    a_settled=$(rss_kb "$agent_pid")
    n_settled=$(rss_kb "$ne_pid")
    settled+=("$a_settled")
    printf '%-6s %12s %12s %12s %12s\n' "$r" "$a_after" "$a_settled" "$n_after" "$n_settled"
    answers+=("round $r: agent $a_out" "         n_e   $n_out")
done
printf '%s\n' "${answers[@]}"

met() { if awk "BEGIN {exit !($1)}"; then echo met; else echo "NOT met"; fi; }
worst=$(printf '%s\n' "${settled[@]}" | sort -n | tail -n1)
first=${settled[0]}
last=${settled[-1]}
echo "targets: agent RSS ${settle_secs}s after each round <= 2x idle ($((2 * a_idle)) KiB): worst $worst KiB -> $(met "$worst <= 2 * $a_idle")"
echo "         no upward trend: after round 1 $first KiB, after round $rounds $last KiB -> $(met "$last <= $first + $conns / 2")"
