#!/usr/bin/env bash
# The whole test suite: formatting, clippy, unit and fixture tests, and the tests
# against real components (containerd + runc over CRI; systemd as PID 1 in
# systemd-nspawn). Installs what it needs.
# Run as root on Debian/Ubuntu: `sudo scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh needs root (it installs packages and runs containerd)." >&2
    echo "Without root, 'cargo test' runs the unit and fixture tests only." >&2
    exit 1
fi

# Debian packages the real-component tests use, by the command that proves each is there.
declare -A packages=(
    [containerd]=containerd
    [runc]=runc
    [protoc]=protobuf-compiler
    [unshare]=util-linux
    # The system tests boot real systemd in a container from a Debian rootfs.
    [systemd-nspawn]=systemd-container
    [mmdebstrap]=mmdebstrap
    [curl]=curl
    [xz]=xz-utils
    [zstd]=zstd
)
missing=()
for cmd in "${!packages[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${packages[$cmd]}")
done
# The test images are built from the static busybox (a dynamic one would need libc in the image).
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# Packaging and fleet tests: rpm to inspect the .rpm, ansible-core and ansible-lint.
command -v rpm >/dev/null 2>&1 || missing+=(rpm)
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
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is not installed: install a Rust toolchain (rustup) first" >&2
    exit 1
fi

# Build outputs and test images are cached outside the checkout.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
# Tests that use containerd fail, rather than skip, when it is missing.
export RDMA_AGENT_REQUIRE_CONTAINERD=1

cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
(cd packaging/ansible && ansible-lint --nocolor -q)

# The packages under test: the release, and a rebuilt one to upgrade to.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
bash scripts/package.sh >/dev/null
bash scripts/package.sh --deb-version "$version-2" >/dev/null
export RDMA_AGENT_DEB="$CARGO_TARGET_DIR/dist/rdma-node-agent_${version}-1_amd64.deb"
export RDMA_AGENT_DEB_UPGRADE="$CARGO_TARGET_DIR/dist/rdma-node-agent_${version}-2_amd64.deb"
export RDMA_AGENT_RPM="$CARGO_TARGET_DIR/dist/rdma-node-agent-${version}-1.x86_64.rpm"
# The real-kernel tier runs the binary we ship (package.sh built it): the VM is TCG,
# where a debug build is slow. RDMA_AGENT_VM=0 turns the tier off (it says so).
RDMA_AGENT_VM_BIN="$CARGO_TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release/rdma-node-agent"
export RDMA_AGENT_VM_BIN
if [ "${RDMA_AGENT_VM:-1}" = 0 ]; then
    echo "RDMA_AGENT_VM=0: the real-kernel tier (QEMU + Soft-RoCE) is turned off"
fi

# Every failing test binary is reported, not only the first.
cargo test --all-targets --no-fail-fast -- --include-ignored

# Every fuzz target, briefly (the seeds plus what a few seconds find); longer
# runs on demand: `scripts/fuzz.sh 600`.
bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
