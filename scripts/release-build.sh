#!/usr/bin/env bash
# Builds the binary we ship and prints its path: release profile, glibc linked
# statically (static-pie), so one build runs on every distribution whatever its
# glibc (RHEL 8's 2.28 included) and pages in less memory than a dynamic one.
# --target keeps the static flag off build scripts and proc macros.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target}"
target=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet --target "$target"
echo "$CARGO_TARGET_DIR/$target/release/rdma-node-agent"
