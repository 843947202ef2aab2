#!/usr/bin/env bash
# Refreshes the fixtures the VM tier records for the fast tests, from a run's
# results (default: the last one, /var/cache/rdma-node-agent/vm/last-results):
#   tests/fixtures/nodes/rxe/        rxe0's sysfs as the guest kernel wrote it
#   tests/fixtures/perftest/rxe/     ib_write_bw's output over rxe, per limit
#   tests/fixtures/dkms/vm/          Debian's dkms status in the guest, across the
#                                    DKMS gate and the reboot into the newer kernel
#   tests/fixtures/restrack/         the kernel's answers to the agent's RDMA
#                                    resource dumps (bytes), and iproute2's listing
# The PROVENANCE files say how they were made; update their dates by hand.
set -euo pipefail
results=${1:-/var/cache/rdma-node-agent/vm/last-results}
here=$(cd "$(dirname "$0")/../.." && pwd)
nodes=$here/tests/fixtures/nodes/rxe
perf=$here/tests/fixtures/perftest/rxe
[ -d "$results/fixture-rxe/sys" ] || { echo "no fixture-rxe in $results" >&2; exit 1; }
find "$nodes" -mindepth 1 ! -name PROVENANCE -delete 2>/dev/null || true
mkdir -p "$nodes" "$perf"
cp -a "$results/fixture-rxe/." "$nodes/"
# One file per side: the client's stdout then its stderr, and the server's.
split() {
    awk -v c="$perf/$2-client.txt" -v s="$perf/$2-server.txt" '
        /^--- server \(exit [0-9]+\) ---$/ { out = 1; next }
        { print > (out ? s : c) }' "$results/$1.out"
    # The client's stderr (inside runc, perftest's failure lands there).
    cat "$results/$1.err" >>"$perf/$2-client.txt"
}
split bw-nolock-64k write-bw-8m-memlock-64k
split bw-nolock-8m write-bw-8m-memlock-8m
split bw-nolock-unlimited write-bw-8m-memlock-unlimited
split runc-64k runc-write-bw-8m-memlock-64k
split runc-agent-spec runc-write-bw-8m-agent-spec
grep -h 'rxe_mr_init_user' "$results"/dmesg-boot1.txt | sed 's/^\[ *[0-9.]*\] //' | sort -u >"$perf/kernel-pin-failure.txt"
dkms=$here/tests/fixtures/dkms/vm
mkdir -p "$dkms"
cp "$results/kernel-b" "$dkms/newer-kernel"
head -n 1 "$results/uname.out" >"$dkms/booted-kernel"
cp "$results/gate-dkms-status.out" "$dkms/status-newer-built.txt"
cp "$results/gate-dkms-status-installed.out" "$dkms/status-newer-installed.txt"
cp "$results/boot3-dkms-status.out" "$dkms/status-after-reboot.txt"
rt=$here/tests/fixtures/restrack
mkdir -p "$rt"
cp "$results/restrack-record.out" "$rt/rxe0-dumps.txt"
cp "$results/restrack-iproute2.out" "$rt/rxe0-rdma-resource-show-pd.txt"
echo "saved into $nodes, $perf, $dkms and $rt"
