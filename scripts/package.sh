#!/usr/bin/env bash
# Builds the .deb and the .rpm from a clean checkout: `scripts/package.sh [--deb-version V]`.
# Packages land in $CARGO_TARGET_DIR/dist/. The man page and completions are
# committed under packaging/generated/ (tests/packaging_assets.rs keeps them
# fresh), so a plain `cargo build --release && cargo deb --no-build` works too;
# this script ships the static-glibc build instead.
# cargo-deb and cargo-generate-rpm are installed once, from crates.io, into a cache.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
tools="${RDMA_AGENT_TOOLS:-/var/cache/rdma-node-agent/tools}"
export PATH="$tools/bin:$PATH"
for tool in cargo-deb cargo-generate-rpm; do
    command -v "$tool" >/dev/null 2>&1 || cargo install --locked --quiet --root "$tools" "$tool"
done

deb_version=()
if [ "${1:-}" = --deb-version ]; then
    deb_version=(--deb-version "$2")
fi

bin=$(bash scripts/release-build.sh)
target=$(basename "$(dirname "$(dirname "$bin")")")
# The peer-probe helper (dynamically linked: librdmacm dlopens the verbs
# providers), beside the agent where both packagers take it from.
for h in rdma/rdma_cma.h infiniband/verbs.h openssl/hmac.h; do
    [ -f "/usr/include/$h" ] || { echo "package.sh: /usr/include/$h is missing: apt-get install librdmacm-dev libibverbs-dev libssl-dev" >&2; exit 1; }
done
make -s -C probe OUT="$(dirname "$bin")" >&2
dist="$CARGO_TARGET_DIR/dist"
mkdir -p "$dist"
# Both tools take the binary from target/<triple>/release/ with --target.
cargo deb --no-build --target "$target" "${deb_version[@]}" --output "$dist/"
cargo generate-rpm --target "$target" --output "$dist/"
ls -1 "$dist"/*.deb "$dist"/*.rpm
