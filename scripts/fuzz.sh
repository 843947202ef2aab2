#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each): `scripts/fuzz.sh [SECONDS]`;
# `scripts/fuzz.sh build` only builds them (scripts/test.sh builds them beside the
# other builds, then runs each for a few seconds; longer runs are on demand).
# cargo-fuzz is installed once into the cache; the stable toolchain is let through
# libFuzzer's -Z flags with RUSTC_BOOTSTRAP (no nightly here).
# A crash leaves its input under fuzz/artifacts/<target>/; the corpora grow in
# fuzz/corpus/<target>/ (keep only small, interesting seeds in the repo).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
tools="${RDMA_AGENT_TOOLS:-/var/cache/rdma-node-agent/tools}"
export PATH="$tools/bin:$PATH"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked --quiet --root "$tools" cargo-fuzz
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/rdma-node-agent/target-fuzz}"
if [ "$seconds" = build ]; then
    exec cargo fuzz build
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cd fuzz && cargo fuzz list); do
    echo "== $target: ${seconds}s"
    mkdir -p "fuzz/corpus/$target"
    # A build failure or a crash both end the run with the fuzzer's own output.
    if ! cargo fuzz run "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "$target: failed (crash inputs, if any, in fuzz/artifacts/$target)" >&2
        exit 1
    fi
    grep -E '^(#[0-9]+ +DONE|Done)' "$log" || true
done
