#!/usr/bin/env bash
# The whole test suite: formatting, clippy, unit and fixture tests, and the tests
# against real components (containerd + runc over CRI; systemd as PID 1 in
# systemd-nspawn). Installs what it needs.
# Run as root on Debian/Ubuntu: `sudo scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/phases.sh

if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh needs root (it installs packages and runs containerd)." >&2
    echo "Without root, 'cargo test' runs the unit and fixture tests only." >&2
    exit 1
fi

# Debian packages the real-component tests use, by the command that proves each is there.
declare -A packages=(
    [containerd]=containerd
    [runc]=runc
    [unshare]=util-linux
    # The system tests boot real systemd in a container from a Debian rootfs.
    [systemd-nspawn]=systemd-container
    [mmdebstrap]=mmdebstrap
    [curl]=curl
    [xz]=xz-utils
    [zstd]=zstd
    # Real artefacts for the kernel tests: depmod, Debian's dkms (and the
    # compiler it builds with), promtool, and node_exporter side by side.
    [depmod]=kmod
    [dkms]=dkms
    [promtool]=prometheus
    # tests/fleet.rs: a real Prometheus scraping 200 agents, its API behind TLS
    # (a test CA made with openssl) and basic auth.
    [prometheus]=prometheus
    [openssl]=openssl
    [prometheus-node-exporter]=prometheus-node-exporter
    # tests/only_scope.rs proves `check --only` on the binary's system calls.
    [strace]=strace
    # selftest's real-perftest test (ib_write_bw finds no RDMA device here and says so).
    [ib_write_bw]=perftest
    # host::rtnetlink's root test flaps a veth pair in a network namespace of its own.
    [ip]=iproute2
    # The ACS tier (tests/vm_acs.rs) reads config space back with setpci, copied into the VM.
    [setpci]=pciutils
)
phase_start install
missing=()
for cmd in "${!packages[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${packages[$cmd]}")
done
# The peer-probe helper (probe/, built by scripts/package.sh) compiles against these.
for dev in librdmacm-dev libibverbs-dev libssl-dev make; do
    dpkg -s "$dev" >/dev/null 2>&1 || missing+=("$dev")
done
# The test images are built from the static busybox (a dynamic one would need libc in the image).
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# Packaging and fleet tests: rpm to inspect the .rpm, lintian and rpmlint to lint
# both packages, ansible-core and ansible-lint.
command -v rpm >/dev/null 2>&1 || missing+=(rpm)
command -v lintian >/dev/null 2>&1 || missing+=(lintian)
command -v rpmlint >/dev/null 2>&1 || missing+=(rpmlint)
# The real-kernel tier (tests/vm_rxe.rs) boots Debian's kernel with Soft-RoCE in QEMU.
# qemu-utils comes from the same release as qemu-system-x86: a newer one (a
# backport) Breaks its qemu-system-common, and apt then installs neither.
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
qemu=()
if [ "${RDMA_AGENT_VM:-1}" != 0 ] && ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    qemu=(qemu-system-x86 "qemu-utils/$(. /etc/os-release && echo "$VERSION_CODENAME")")
fi
# libFuzzer, built by cargo-fuzz, is C++.
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v ansible-playbook >/dev/null 2>&1 || missing+=(ansible-core)
command -v ansible-lint >/dev/null 2>&1 || missing+=(ansible-lint)
# A real Prometheus parser for the metrics test, and YAML for the alert rules (Debian's python3).
/usr/bin/python3 -c 'import prometheus_client, yaml' >/dev/null 2>&1 || missing+=(python3-prometheus-client python3-yaml)
if ((${#missing[@]} + ${#qemu[@]})); then
    echo "installing: ${missing[*]} ${qemu[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        --allow-downgrades "${missing[@]}" "${qemu[@]}" >/dev/null
fi
phase_end install
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is not installed: install a Rust toolchain (rustup) first" >&2
    exit 1
fi

# Build outputs and test images are cached outside the checkout, one target dir
# per kind of build: debug (clippy, tests), release (the packages) and fuzz
# (cargo-fuzz's own workspace and sanitizer flags). No artifact could be shared
# between them, and apart each lane runs without waiting on the others' lock.
cache=/var/cache/rdma-node-agent
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
release_dir="${RDMA_AGENT_RELEASE_TARGET_DIR:-$cache/target-release}"
fuzz_dir="${RDMA_AGENT_FUZZ_TARGET_DIR:-$cache/target-fuzz}"
# Tests that use containerd fail, rather than skip, when it is missing.
export RDMA_AGENT_REQUIRE_CONTAINERD=1
# Debian kernel packages, the kernel's sysfs.c and real DKMS builds, cached in
# /var/cache/rdma-node-agent/artefacts; the tests that read them fail without.
bash scripts/fixtures/fetch-artefacts.sh >/dev/null
export RDMA_AGENT_REQUIRE_ARTEFACTS=1

phase fmt cargo fmt --all -- --check

# The VM image (mmdebstrap: minutes of downloads and unpacking on a first run) is
# built from the start, beside the compilation, not after the release build; the
# VM lane's image.sh waits on the same lock and finds it built.
vm_image_lane() { phase vm-image nice -n 5 bash tests/vm/image.sh >/dev/null; }
if [ "${RDMA_AGENT_VM:-1}" != 0 ]; then
    lane vm-image vm_image_lane
fi

# Lanes beside the main one while everything compiles: the debug builds (main)
# use both cores most of the time; the release build's single-threaded LTO link
# and the fuzz build fill the gaps. Each lane's output goes to a log, shown when
# it fails.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
dist="$release_dir/dist"
packages_lane() {
    # The packages under test: the release, and a rebuilt one to upgrade to.
    CARGO_TARGET_DIR="$release_dir" phase package bash scripts/package.sh
    CARGO_TARGET_DIR="$release_dir" phase package-upgrade bash scripts/package.sh --deb-version "$version-2"
    phase lint-packages bash scripts/lint-packages.sh \
        "$dist/rdma-node-agent_${version}-1_amd64.deb" "$dist/rdma-node-agent-${version}-1.x86_64.rpm"
    phase ansible-lint bash -c 'cd packaging/ansible && ansible-lint --nocolor -q'
}
# Every fuzz target, briefly (the seeds plus what a few seconds find), as soon
# as they are built; longer runs on demand: `scripts/fuzz.sh 600`.
fuzz_lane() {
    CARGO_TARGET_DIR="$fuzz_dir" phase fuzz-build bash scripts/fuzz.sh build
    # Niced: the tests that measure latencies run beside it.
    CARGO_TARGET_DIR="$fuzz_dir" phase fuzz nice -n 5 bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
}
lane packages packages_lane
lane fuzz fuzz_lane
phase clippy cargo clippy --all-targets --quiet -- -D warnings
phase test-build cargo test --all-targets --no-run --quiet
# The VM tier's CRI client for its guest (tests/vm/nri.rs builds it too): built
# here, before any test runs, its build in the VM lane finds it fresh.
phase vm-guest-build cargo build --example vm-nri-guest --quiet
# containerd 1.7 and 2.x from Debian's trixie and sid packages (unpacked into the
# cache, not installed), for the real-world corpus test's `containerd config dump`.
phase fetch-containerd bash scripts/fetch-containerd.sh
# Every live tier installs the package: the system tests (nspawn) and the VM
# lane start only once the packages lane built it.
wait_lane packages

export RDMA_AGENT_DEB="$dist/rdma-node-agent_${version}-1_amd64.deb"
export RDMA_AGENT_DEB_UPGRADE="$dist/rdma-node-agent_${version}-2_amd64.deb"
export RDMA_AGENT_RPM="$dist/rdma-node-agent-${version}-1.x86_64.rpm"

# The long run (tests/long_run.rs: 10,000 reconciles) runs the binary we ship
# (package.sh built it): a debug build's cycle is three to five times slower.
RDMA_AGENT_RELEASE_BIN="$release_dir/$(rustc -vV | sed -n 's/^host: //p')/release/rdma-node-agent"
export RDMA_AGENT_RELEASE_BIN
# The VM tiers install RDMA_AGENT_DEB in the guest and run it under its unit.
# RDMA_AGENT_VM=0 turns them off (they say so).
if [ "${RDMA_AGENT_VM:-1}" = 0 ]; then
    echo "RDMA_AGENT_VM=0: the real-kernel tier (QEMU + Soft-RoCE) is turned off"
fi
# It runs in a lane of its own beside the other tests: QEMU (TCG, one vCPU,
# niced) keeps one core busy for minutes, mostly booting and waiting on the
# guest, and the other tests leave a core to it.
vm_lane() {
    phase vm-tier cargo test --test vm_rxe -- --include-ignored --nocapture
    # The ACS tier: two boots of the same image as a q35 machine with a PCIe switch.
    phase vm-acs cargo test --test vm_acs -- --include-ignored --nocapture
    # The peer-probe tier: the package's probe helper over Soft-RoCE, one boot.
    phase vm-peers cargo test --test vm_peers -- --include-ignored --nocapture
    # The multi-node fabric tier: four daemons on eight rxe ports, a 10-minute
    # fault-free run and one fault per node, one boot (~18 min).
    phase vm-fabric cargo test --test vm_fabric -- --include-ignored --nocapture
}
lane vm vm_lane

# Every other test target. Every failing test binary is reported, not only the
# first, and the lanes still finish and report before the script fails.
tests=(--lib --bins --benches --examples)
while read -r name; do
    case $name in vm_rxe | vm_acs | vm_peers | vm_fabric) ;; *) tests+=(--test "$name") ;; esac
done < <(cargo metadata --no-deps --format-version 1 | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"]:
            print(t["name"])')
phase_keep_going test cargo test "${tests[@]}" --no-fail-fast -- --include-ignored
# The doc tests, among them the compile_fail ones that hold the read/write split
# (a gather cannot restart a unit, an effect cannot reach the whole Host,
# nothing writes agent state around its writer): cargo runs them only with --doc.
phase_keep_going doctest cargo test --doc
status=0
finish_lanes || status=$?
echo "== what the real-kernel tier said (lane vm):"
lane_log vm | grep -vE '^\s*(Compiling|Finished|Running|Blocking)|^[a-z0-9-]+ +[0-9.]+ s$' | tail -n 30 | cut -c1-1000 || true
# Last, where a log's tail is all a reader gets: each failed assertion's
# place and message (the first 600 characters of each line).
if lane_log vm | grep -q 'panicked at'; then
    echo "== the real-kernel tier's failed assertions:"
    lane_log vm | grep -A1 'panicked at' | grep -v '^--$' | cut -c1-600 | tail -n 24 || true
fi
exit "$status"
