#!/usr/bin/env bash
# Issue 34 item 6: the check on the synthetic 1024-device SR-IOV tree (8 PFs,
# 127 VFs each; tests/support/sysfs.rs), two agent binaries side by side in
# one run (e.g. the release build of the commit before the RDMA inventory and
# of the one after), each against the floor: a bare open/read/close of exactly
# the files that binary's check opened (from its own system calls, as
# scripts/bench-vs-node-exporter.sh does). Runs alternate between the binaries
# so that load on the machine falls on both alike.
#
#   scripts/bench-inventory.sh BEFORE_BIN AFTER_BIN
#
# RUNS (default 11) runs per figure, medians; DEVICES_PER_PF (default 127).
# Targets: the full check <= 20 ms wall and <= 1.3x the floor's CPU.
#
# A second floor beside it ("walk floor", columns "w cpu" and "x wcpu"): the
# same files, plus a bare listing of each directory the check listed (open,
# getdents64 to the end, close) and a bare read of each link it read, by path:
# what any walk of the class must do besides reading files. It does not
# replace the first; the target is against the first.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
after=$2
runs="${RUNS:-11}"
vfs="${DEVICES_PER_PF:-127}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
cargo build --quiet --example bench_sysfs
helper="$CARGO_TARGET_DIR/debug/examples/bench_sysfs"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree="$work/tree"
"$helper" tree "$tree" 8 "$vfs"
devices=$((8 * (vfs + 1)))

# `timed CMD...` -> "wall_ms cpu_ms" of one run (after one warm-up run):
# CPU = user + system time of the process and its threads.
timed() {
    python3 - "$@" <<'EOF'
import resource, subprocess, sys, time
cmd = sys.argv[1:]
subprocess.run(cmd, stdout=subprocess.DEVNULL)
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.perf_counter()
code = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
t1 = time.perf_counter()
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
if code not in (0, 1, 2):  # check's ok / failed / could not tell
    sys.exit(f"{cmd} exited {code}")
print(f"{(t1 - t0) * 1e3:.2f} {(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1e3:.2f}")
EOF
}
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
at_most() { if awk -v v="$1" -v t="$2" 'BEGIN {exit !(v + 0 <= t + 0)}'; then echo met; else echo "NOT met"; fi; }

# The files a command opened (not directories), by their real paths.
files_of() { # OUT CMD...
    local out=$1
    shift
    rm -rf "$work/opens"
    mkdir "$work/opens"
    # The check's exit status says ok / failed / could not tell: not an error here.
    strace -f -ff -qq -y -e trace=openat,openat2 -o "$work/opens/t" "$@" >/dev/null || true
    cat "$work"/opens/t.* | grep -v -e O_DIRECTORY -e O_PATH -e '= -1 ' |
        sed -n "s|.*) = [0-9]*<\(/[^>]*\)>\$|\1|p" | grep -v -e '^/dev/' -e '^/proc/self' >"$out" || true
}
# The directories a command listed to their end and the links it read, by
# their paths: for the walk floor.
walk_of() { # DIRS LINKS CMD...
    local dirs=$1 links=$2
    shift 2
    rm -rf "$work/walk"
    mkdir "$work/walk"
    # One file per thread (-ff): no call split by another thread's.
    strace -f -ff -qq -y -s 512 -e trace=getdents64,readlinkat,readlink -o "$work/walk/t" "$@" >/dev/null || true
    cat "$work"/walk/t.* >"$work/walk/all"
    sed -n 's|^getdents64([0-9]*<\(/[^>]*\)>, .* = 0$|\1|p' "$work/walk/all" | grep -v '^/proc' >"$dirs" || true
    {
        sed -n 's|^readlinkat([0-9]*<\(/[^>]*\)>, "\([^"]*\)", .* = [0-9][0-9]*$|\1/\2|p' "$work/walk/all"
        sed -n 's|^readlink("\([^"]*\)", .* = [0-9][0-9]*$|\1|p' "$work/walk/all"
    } | grep -v -e '^/proc' >"$links" || true
}
syscalls() { # CMD... -> total system calls of the process and its threads
    strace -f -c -o "$work/strace-c" "$@" >/dev/null || true
    awk '$NF == "total" {print $4}' "$work/strace-c"
}

echo "RDMA inventory, before vs after; $(date -u +%F), $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); $devices devices; medians of $runs"
printf '%-34s %9s %9s %9s %9s %8s %8s %13s %7s %9s %8s %11s\n' case wall cpu "floor" "f cpu" "x wall" "x cpu" syscalls files "w cpu" "x wcpu" "dirs/links"
for scope in full only; do
    for which in before after; do
        bin=${!which}
        case $scope in
        full) cmd=("$bin" --root "$tree" check --json) ;;
        only) cmd=("$bin" --root "$tree" check --only rdma.devices --json) ;;
        esac
        files_of "$work/files-$scope-$which" "${cmd[@]}"
        walk_of "$work/dirs-$scope-$which" "$work/links-$scope-$which" "${cmd[@]}"
        : >"$work/t-$scope-$which"
        : >"$work/f-$scope-$which"
        : >"$work/w-$scope-$which"
        echo "$(syscalls "${cmd[@]}")/$(syscalls "$helper" floor "$work/files-$scope-$which")" >"$work/s-$scope-$which"
    done
    # Alternate: before, after, their floors, RUNS times.
    for _ in $(seq "$runs"); do
        for which in before after; do
            bin=${!which}
            case $scope in
            full) cmd=("$bin" --root "$tree" check --json) ;;
            only) cmd=("$bin" --root "$tree" check --only rdma.devices --json) ;;
            esac
            timed "${cmd[@]}" >>"$work/t-$scope-$which"
            timed "$helper" floor "$work/files-$scope-$which" >>"$work/f-$scope-$which"
            timed "$helper" floor-walk "$work/files-$scope-$which" "$work/dirs-$scope-$which" \
                "$work/links-$scope-$which" >>"$work/w-$scope-$which"
        done
    done
    for which in before after; do
        w=$(cut -d' ' -f1 "$work/t-$scope-$which" | median)
        c=$(cut -d' ' -f2 "$work/t-$scope-$which" | median)
        fw=$(cut -d' ' -f1 "$work/f-$scope-$which" | median)
        fc=$(cut -d' ' -f2 "$work/f-$scope-$which" | median)
        wc_=$(cut -d' ' -f2 "$work/w-$scope-$which" | median)
        label="check $([ "$scope" = full ] && echo "--json (every concern)" || echo "--only rdma.devices")"
        printf '%-34s %9s %9s %9s %9s %8s %8s %13s %7s %9s %8s %11s\n' "$label, $which" "$w" "$c" "$fw" "$fc" \
            "$(ratio "$w" "$fw")" "$(ratio "$c" "$fc")" "$(cat "$work/s-$scope-$which")" \
            "$(wc -l <"$work/files-$scope-$which")" "$wc_" "$(ratio "$c" "$wc_")" \
            "$(wc -l <"$work/dirs-$scope-$which")/$(wc -l <"$work/links-$scope-$which")"
        eval "w_${scope}_$which=$w c_${scope}_$which=$c fc_${scope}_$which=$fc wc_${scope}_$which=$wc_"
    done
done
x=$(ratio "$c_full_after" "$fc_full_after")
echo "targets: full check at $devices devices <= 20 ms wall: $w_full_after ms -> $(at_most "$w_full_after" 20) (before: $w_full_before ms)"
echo "         its CPU <= 1.3x the floor's: ${x}x -> $(at_most "$x" 1.3) (before: $(ratio "$c_full_before" "$fc_full_before")x)"
echo "         (against the walk floor, not a target: $(ratio "$c_full_after" "$wc_full_after")x; before: $(ratio "$c_full_before" "$wc_full_before")x)"
