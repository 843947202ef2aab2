#!/usr/bin/env bash
# rdma-node-agent side by side with Debian's prometheus-node-exporter, measured in
# one run, printed as one table:
#  1. the RDMA inventory at 64, 1024 and 4096 devices (synthetic SR-IOV sysfs
#     trees): `check --only rdma.devices --json` as a whole process, against a bare
#     open/read/close pass over exactly the files that check reads (the floor,
#     taken from strace of the check itself) and against one scrape of
#     node_exporter's infiniband collector over the same tree (--path.sysfs);
#     system calls (strace -c) and user-space instructions (valgrind) beside the
#     times, as they do not move with the machine's load;
#  2. `check --only rdma.devices` against a full check on the V100 sample with a
#     real Debian kernel's modules installed (linux-image from apt, cached);
#  3. start to READY=1 on the same sample as systemd itself records it: the
#     shipped Type=notify unit on real systemd in systemd-nspawn
#     (tests/system_ready.rs), a first start (its reconcile edits the sample)
#     and converged restarts, and the same without the unit's sandbox;
#  4. both daemons on the bundled V100 sample node: start to READY=1 through a
#     notify socket of our own (no systemd) and to the first answer, idle RSS,
#     wake-ups while idle, /metrics req/s and latency under the same bounded wrk
#     load, RSS after it;
#  5. memory under hostile clients, RSS per round beside node_exporter
#     (scripts/bench-memory-abuse.sh; ABUSE_ROUNDS=0 leaves it out).
# On demand (not in CI), as root: `sudo scripts/bench-vs-node-exporter.sh`.
# RUNS (default 9: medians), SIZES ("64 1024 4096"), IDLE_SECS (10), WAKE_SECS (30)
# and LOAD_SECS (10) tune it. Times move with the load of the machine: take the
# figures for docs/performance.md on a quiet one.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${RUNS:-9}"
sizes="${SIZES:-64 1024 4096}"
idle_secs="${IDLE_SECS:-10}"
wake_secs="${WAKE_SECS:-30}"
load_secs="${LOAD_SECS:-10}"
agent_addr=127.0.0.1:19470
ne_addr=127.0.0.1:19100
ne_ib_addr=127.0.0.1:19101

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
command -v curl >/dev/null || need+=(curl)
command -v strace >/dev/null || need+=(strace)
command -v depmod >/dev/null || need+=(kmod)
command -v valgrind >/dev/null || need+=(valgrind)
command -v python3 >/dev/null || need+=(python3)
if ((${#need[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
# The binary the packages ship (static glibc), and the tree generator and floor.
agent=$(bash scripts/release-build.sh)
cargo build --quiet --example bench_sysfs
helper="$CARGO_TARGET_DIR/debug/examples/bench_sysfs"

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# `timed RUNS CMD...` -> "wall_ms cpu_ms": medians over RUNS runs after one warm-up
# (page cache), CPU = user + system time of the process and its threads.
timed() {
    python3 - "$@" <<'EOF'
import resource, statistics, subprocess, sys, time
runs, cmd = int(sys.argv[1]), sys.argv[2:]
walls, cpus = [], []
for i in range(runs + 1):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code not in (0, 1, 2):  # check's ok / failed / could not tell
        sys.exit(f"{cmd} exited {code}")
    if i:
        walls.append((t1 - t0) * 1e3)
        cpus.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1e3)
print(f"{statistics.median(walls):.1f} {statistics.median(cpus):.1f}")
EOF
}

# `scraped RUNS URL PID` -> "wall_ms cpu_ms": median scrape time and the server's
# CPU per scrape (from /proc/PID/stat), after one warm-up scrape.
scraped() {
    python3 - "$@" <<'EOF'
import os, statistics, sys, time, urllib.request
runs, url, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
urllib.request.urlopen(url).read()
c0, walls = cpu(), []
for _ in range(runs):
    t0 = time.perf_counter()
    urllib.request.urlopen(url).read()
    walls.append((time.perf_counter() - t0) * 1e3)
print(f"{statistics.median(walls):.1f} {(cpu() - c0) * 1e3 / runs:.1f}")
EOF
}

syscalls() { # CMD... -> total system calls of the process and its threads
    strace -f -c -o "$work/strace-c" "$@" >/dev/null
    awk '$NF == "total" {print $4}' "$work/strace-c"
}
# Valgrind (3.19) knows no openat2: under it the check reads through the host
# layer's path-based fallback, so this counts that path, not the one timed above.
instructions() { # CMD... -> user-space instructions, in millions
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
        awk '/Collected :/ {printf "%.1f", $NF / 1e6}'
}
wait_200() { # url: until it answers 200
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ]; do sleep 0.005; done
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
switches() { # context switches of every thread of a process (each one a wake-up)
    cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
at_most() { if awk -v v="$1" -v t="$2" 'BEGIN {exit !(v + 0 <= t + 0)}'; then echo met; else echo "NOT met"; fi; }
at_least() { if awk -v v="$1" -v t="$2" 'BEGIN {exit !(v + 0 >= t + 0)}'; then echo met; else echo "NOT met"; fi; }
ms() { # wrk latency ("1.23ms", "850.00us", "2.1s") in milliseconds
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) {sub(/us$/, "", v); printf "%.2f", v / 1000}
        else if (v ~ /ms$/) {sub(/ms$/, "", v); printf "%.2f", v}
        else {sub(/s$/, "", v); printf "%.2f", v * 1000}
    }'
}

# 1. The inventory at each size.
declare -A wall cpu
inventory=()
for n in $sizes; do
    # 8 physical functions, the rest virtual ones, as on an SR-IOV node.
    vfs=$((n / 8 - 1))
    tree="$work/tree-$n"
    "$helper" tree "$tree" 8 "$vfs"
    check=("$agent" --root "$tree" check --only rdma.devices --json)
    # The files the check reads, from its own system calls: the floor reads exactly those.
    # Opens are relative to a directory's descriptor (openat2): -y names what each
    # returned descriptor is (its real path); one file per thread keeps lines whole.
    rm -rf "$work/opens"
    mkdir "$work/opens"
    strace -f -ff -qq -y -e trace=openat,openat2 -o "$work/opens/t" "${check[@]}" >/dev/null
    cat "$work"/opens/t.* | grep -v -e O_DIRECTORY -e O_PATH -e '= -1 ' |
        sed -n "s|.*) = [0-9]*<\($tree/[^>]*\)>\$|\1|p" >"$work/files-$n"
    files=$(wc -l <"$work/files-$n")
    floor=("$helper" floor "$work/files-$n")

    read -r a_wall a_cpu < <(timed "$runs" "${check[@]}")
    read -r f_wall f_cpu < <(timed "$runs" "${floor[@]}")
    prometheus-node-exporter --web.listen-address="$ne_ib_addr" --path.sysfs="$tree/sys" \
        --collector.disable-defaults --collector.infiniband >/dev/null 2>&1 &
    ne_ib=$!
    pids+=("$ne_ib")
    wait_200 "http://$ne_ib_addr/metrics"
    ne_ports=$(curl -s "http://$ne_ib_addr/metrics" | grep -c '^node_infiniband_info' || true)
    ne_ok=$(curl -s "http://$ne_ib_addr/metrics" |
        awk '/^node_scrape_collector_success\{collector="infiniband"\}/ {print $2}')
    read -r n_wall n_cpu < <(scraped "$runs" "http://$ne_ib_addr/metrics" "$ne_ib")
    kill "$ne_ib"
    wait "$ne_ib" 2>/dev/null || true

    a_sys=$(syscalls "${check[@]}")
    f_sys=$(syscalls "${floor[@]}")
    a_ins=$(instructions "${check[@]}")
    wall[$n]=$a_wall
    cpu[$n]=$a_cpu
    inventory+=("$(printf '%-8s %9s %9s %9s %9s %8s %9s %9s %8s %11s %8s %8s' \
        "$n" "$a_wall" "$a_cpu" "$f_wall" "$f_cpu" "$(ratio "$a_wall" "$f_wall")" \
        "$n_wall" "$n_cpu" "$(ratio "$a_wall" "$n_wall")" "$a_sys/$f_sys" "$files" "$a_ins")")
    if [ "$ne_ok" != 1 ] || [ "$ne_ports" -lt "$n" ]; then
        inventory+=("         node_exporter's infiniband collector did not read the tree (success=$ne_ok, $ne_ports devices)")
    fi
done

# 2. `--only` against a full check on a kernel-heavy node: the V100 sample with a
# real Debian kernel's 4000 modules installed (its RDMA ones xz-compressed, as
# distributions ship them), which a full check walks and partly decompresses.
kernel_deb=${KERNEL_DEB:-$(ls /var/cache/rdma-node-agent/bench/linux-image-*-amd64_*.deb 2>/dev/null | head -n 1)}
if [ -z "$kernel_deb" ]; then
    mkdir -p /var/cache/rdma-node-agent/bench
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    (cd /var/cache/rdma-node-agent/bench && apt-get download -qq "$pkg" 2>/dev/null)
    kernel_deb=$(ls /var/cache/rdma-node-agent/bench/linux-image-*-amd64_*.deb | head -n 1)
fi
heavy="$work/heavy"
cp -a tests/fixtures/nodes/v100/. "$heavy/"
release=$(cat "$heavy/proc/sys/kernel/osrelease")
mkdir -p "$work/kernel" "$heavy/lib/modules/$release"
dpkg-deb --fsys-tarfile "$kernel_deb" | tar -x -C "$work/kernel" --wildcards '*lib/modules/*'
# /lib/modules, or /usr/lib/modules in a merged-/usr package.
modules_src=$(find "$work/kernel" -mindepth 3 -maxdepth 4 -type d -path '*lib/modules/*' | head -n 1)
mv "$modules_src"/* "$heavy/lib/modules/$release/"
find "$heavy/lib/modules/$release/kernel/drivers/infiniband" \
    "$heavy/lib/modules/$release/kernel/drivers/net/ethernet/mellanox" -name '*.ko' -exec xz -T0 {} +
# As the package's install does: modules.dep, which kernel.modules reads to know
# the file each module loads from (without it the check is unknown, reads none).
depmod -b "$heavy" "$release"
modules=$(find "$heavy/lib/modules/$release" -name '*.ko*' | wc -l)
compressed=$(find "$heavy/lib/modules/$release" -name '*.ko.xz' | wc -l)
read -r full_wall full_cpu < <(timed "$runs" "$agent" --root "$heavy" check --json)
read -r only_wall only_cpu < <(timed "$runs" "$agent" --root "$heavy" check --only rdma.devices --json)

# 3. Start to READY=1 as systemd records it (ExecMainStart -> ActiveEnter
# timestamps): the shipped Type=notify unit serving the same sample, on real
# systemd in systemd-nspawn (tests/system_ready.rs; the cached rootfs of the
# system tests), with and without the unit's file-system sandbox.
# The test installs the package (its unit, its postinst) and then runs "$agent" in it.
deb=${RDMA_AGENT_DEB:-$(ls -t /var/cache/rdma-node-agent/target-release/dist/rdma-node-agent_*-1_amd64.deb 2>/dev/null | head -n 1)}
[ -n "$deb" ] || { echo "bench: no .deb: run scripts/package.sh (or set RDMA_AGENT_DEB)" >&2; exit 1; }
sd_ready=$(RDMA_AGENT_DEB="$deb" RDMA_AGENT_READY_BIN="$agent" cargo test --quiet --test system_ready -- \
    --ignored --nocapture 2>&1 | grep '^READY_MS' || true)
sd_field() { # name -> its value in the READY_MS line, or "n/a"
    local v
    v=$(printf '%s\n' "$sd_ready" | tr ' ' '\n' | sed -n "s/^$1=//p")
    echo "${v:-n/a}"
}
sd_first=$(sd_field first)
sd_converged=$(sd_field converged)
sd_bare_first=$(sd_field unsandboxed_first)
sd_bare_converged=$(sd_field unsandboxed_converged)

# 4. The daemons on the sample node.
root="$work/v100"
cp -a tests/fixtures/nodes/v100/. "$root/"
now_ms() { date +%s%3N; }
# Start to READY=1: a notify socket like systemd's (Type=notify), after the first
# reconcile. `ready` prints "ms pid" and leaves the daemon running.
ready() {
    rm -f "$work/notify"
    python3 - "$work/notify" "$agent" --root "$root" serve --listen "$agent_addr" <<'EOF'
import os, socket, subprocess, sys, time
path, cmd = sys.argv[1], sys.argv[2:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
t0 = time.perf_counter()
p = subprocess.Popen(cmd, env=dict(os.environ, NOTIFY_SOCKET=path),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
s.settimeout(30)
while b"READY=1" not in s.recv(65536).split(b"\n"):
    pass
print(f"{(time.perf_counter() - t0) * 1e3:.1f} {p.pid}")
EOF
}
# First start: the sample is not converged, so the first reconcile edits it
# (containerd validates the candidate config, every write is fsynced).
read -r agent_ready_fresh first_pid < <(ready)
kill "$first_pid"
while [ -e "/proc/$first_pid" ]; do sleep 0.01; done
# A restart on the node it converged: what a reboot or an upgrade sees.
read -r agent_ready agent_pid < <(ready)
pids+=("$agent_pid")
start=$(now_ms)
wait_200 "http://$agent_addr/healthz"
agent_answer=$(($(now_ms) - start))

start=$(now_ms)
prometheus-node-exporter --web.listen-address="$ne_addr" >/dev/null 2>&1 &
ne_pid=$!
pids+=("$ne_pid")
wait_200 "http://$ne_addr/metrics"
ne_start=$(($(now_ms) - start))

sleep "$idle_secs"
agent_idle=$(rss_kb "$agent_pid")
ne_idle=$(rss_kb "$ne_pid")

a0=$(switches "$agent_pid")
n0=$(switches "$ne_pid")
sleep "$wake_secs"
agent_wake=$(($(switches "$agent_pid") - a0))
ne_wake=$(($(switches "$ne_pid") - n0))

load() { # url [wrk options] -> "req/s p50 p99"
    local url=$1
    shift
    wrk "${@:--t2}" -c"${conns:-32}" -d"${load_secs}s" --latency "$url" 2>/dev/null | awk '
        /Requests\/sec/ {rps = $2}
        /^ +50%/ {p50 = $2}
        /^ +99%/ {p99 = $2}
        END {print rps, p50, p99}'
}
read -r a_ready_rps a_ready_p50 a_ready_p99 < <(load "http://$agent_addr/readyz")
read -r a_rps a_p50 a_p99 < <(load "http://$agent_addr/metrics")
read -r n_rps n_p50 n_p99 < <(load "http://$ne_addr/metrics")
# One connection, one request at a time: nothing queues, so what is left in the
# tail is the server descheduled (load generator and server share the 2 cores).
read -r a1_rps a1_p50 a1_p99 < <(conns=1 load "http://$agent_addr/metrics" -t1)
read -r n1_rps n1_p50 n1_p99 < <(conns=1 load "http://$ne_addr/metrics" -t1)
agent_load=$(rss_kb "$agent_pid")
ne_load=$(rss_kb "$ne_pid")

ne_version=$(prometheus-node-exporter --version 2>&1 | head -n1 | awk '{print $3}')
echo "rdma-node-agent vs prometheus-node-exporter $ne_version; $(date -u +%F), $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); medians of $runs"
echo
echo "RDMA inventory: \`check --only rdma.devices --json\` (whole process) vs a bare"
echo "open/read/close of the same files vs one node_exporter infiniband scrape (ms)"
printf '%-8s %9s %9s %9s %9s %8s %9s %9s %8s %11s %8s %8s\n' devices "check" "cpu" floor "cpu" "x floor" \
    "n_e" "cpu" "x n_e" "syscalls" files "Minstr"
printf '%s\n' "${inventory[@]}"
set -- $sizes
if (($# >= 2)); then
    # Growth: the cost of each added device, between consecutive sizes.
    prev=$1
    shift
    for n in "$@"; do
        printf '  per added device %s -> %s: %s µs\n' "$prev" "$n" \
            "$(awk -v a="${wall[$prev]}" -v b="${wall[$n]}" -v m="$prev" -v n="$n" 'BEGIN {printf "%.1f", (b - a) * 1000 / (n - m)}')"
        prev=$n
    done
fi
echo
echo "kernel-heavy V100 node ($(basename "$kernel_deb"): $modules modules, $compressed xz-compressed), ms"
printf '%-44s %9s %9s\n' "" wall cpu
printf '%-44s %9s %9s\n' "check --json (every concern)" "$full_wall" "$full_cpu"
printf '%-44s %9s %9s\n' "check --only rdma.devices --json" "$only_wall" "$only_cpu"
echo
printf '%-44s %18s %18s\n' "daemons on the V100 sample node" "rdma-node-agent" "node_exporter"
printf '%-44s %18s %18s\n' "systemd: start to READY=1, first start (ms)" "$sd_first" "-"
printf '%-44s %18s %18s\n' "systemd: start to READY=1, converged (ms)" "$sd_converged" "-"
printf '%-44s %18s %18s\n' "  the same without the unit's sandbox (ms)" "$sd_bare_first / $sd_bare_converged" "-"
printf '%-44s %18s %18s\n' "notify socket: first start / converged (ms)" "$agent_ready_fresh / $agent_ready" "-"
printf '%-44s %18s %18s\n' "start to first 200 (ms)" "$agent_answer (after READY)" "$ne_start"
printf '%-44s %18s %18s\n' "idle RSS after ${idle_secs}s (KiB)" "$agent_idle" "$ne_idle"
printf '%-44s %18s %18s\n' "wake-ups while idle, ${wake_secs}s" "$agent_wake" "$ne_wake"
printf '%-44s %18s %18s\n' "/metrics req/s (wrk -t2 -c32 ${load_secs}s)" "$a_rps" "$n_rps"
printf '%-44s %18s %18s\n' "/metrics latency p50 / p99" "$a_p50 / $a_p99" "$n_p50 / $n_p99"
printf '%-44s %18s %18s\n' "/metrics p50 / p99, 1 connection (wrk -t1 -c1)" "$a1_p50 / $a1_p99" "$n1_p50 / $n1_p99"
printf '%-44s %18s %18s\n' "/metrics req/s, 1 connection" "$a1_rps" "$n1_rps"
printf '%-44s %18s %18s\n' "/readyz req/s, p50 / p99" "$a_ready_rps, $a_ready_p50 / $a_ready_p99" "-"
printf '%-44s %18s %18s\n' "RSS after load (KiB)" "$agent_load" "$ne_load"
echo
big=${sizes##* }
mid=1024
[ -n "${wall[$mid]:-}" ] || mid=$big
x_floor=$(printf '%s\n' "${inventory[@]}" | awk -v n="$mid" '$1 == n {print $6}')
x_ne=$(printf '%s\n' "${inventory[@]}" | awk -v n="$mid" '$1 == n {print $9}')
x_cpu=$(printf '%s\n' "${inventory[@]}" | awk -v n="$mid" '$1 == n {printf "%.2f", $3 / $5}')
x_sys=$(printf '%s\n' "${inventory[@]}" | awk -v n="$mid" '$1 == n {split($10, c, "/"); printf "%.2f", c[1] / c[2]}')
echo "targets: check at $mid devices <= 1.5x the floor: ${x_floor}x -> $(at_most "$x_floor" 1.5)"
echo "         (its CPU: ${x_cpu}x the floor's -> $(at_most "$x_cpu" 1.5); system calls: ${x_sys}x -> $(at_most "$x_sys" 1.5))"
echo "         check at $mid devices <= 1/3 of a node_exporter scrape: ${x_ne}x -> $(at_most "$x_ne" 0.3334)"
echo "         --only <= 1/3 of a full check, kernel-heavy node: $(ratio "$only_wall" "$full_wall")x -> $(at_most "$(ratio "$only_wall" "$full_wall")" 0.3334)"
echo "         idle RSS <= 1/3 of node_exporter's: $(ratio "$agent_idle" "$ne_idle") -> $(at_most "$(ratio "$agent_idle" "$ne_idle")" 0.3334)"
if [ "$sd_converged" = n/a ]; then
    echo "         start to READY <= 100 ms, systemd: not measured (run tests/system_ready.rs alone to see why)"
else
    echo "         start to READY <= 100 ms, systemd, converged node: $sd_converged ms -> $(at_most "$sd_converged" 100)"
    echo "         start to READY <= 100 ms, systemd, first start: $sd_first ms -> $(at_most "$sd_first" 100)"
fi
echo "         /metrics throughput >= 50x: $(ratio "$a_rps" "$n_rps")x -> $(at_least "$(ratio "$a_rps" "$n_rps")" 50)"
echo "         /metrics p99 <= 2 ms: $(ms "$a_p99") ms -> $(at_most "$(ms "$a_p99")" 2)"

# 5. Memory under hostile clients: its own table.
if [ "${ABUSE_ROUNDS:-5}" != 0 ]; then
    echo
    ROUNDS="${ABUSE_ROUNDS:-5}" bash scripts/bench-memory-abuse.sh
fi
