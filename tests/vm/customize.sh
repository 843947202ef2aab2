#!/bin/sh
# mmdebstrap's customize hook for the VM image (tests/vm/image.sh): runs on the
# build host, native speed, with the new system at $1 (proc, sys, dev mounted).
#
# A second, newer kernel, the way a Debian node gets one: bookworm-backports'
# linux-image-amd64 and linux-headers-amd64 (`apt install -t bookworm-backports`),
# next to bookworm's kernel the image already boots. Then a tiny module added to
# Debian's real dkms and built by it for both kernels, installed for the older
# (the one the VM boots first) only: the newer kernel's build waits for the
# guest's `dkms install` (a copy and depmod), so nothing compiles under TCG.
set -eu
root=$1
chr() { chroot "$root" "$@"; }
export DEBIAN_FRONTEND=noninteractive

echo 'deb http://deb.debian.org/debian bookworm-backports main' \
    >"$root/etc/apt/sources.list.d/bookworm-backports.list"
chr apt-get update -q
chr apt-get install -y -q --no-install-recommends \
    -t bookworm-backports linux-image-amd64 linux-headers-amd64

# The hand-written module source (see its PROVENANCE), shared with
# scripts/fixtures/fetch-artefacts.sh.
src=$root/usr/src/rdma-probe-1.0
mkdir -p "$src"
module=$(cd "$(dirname "$0")/../fixtures/dkms/rdma-probe" && pwd)
cp "$module/rdma_probe.c" "$module/Makefile" "$module/dkms.conf" "$src/"
chr dkms add -m rdma-probe -v 1.0
kernels=$(ls "$root/lib/modules" | sort -V)
for k in $kernels; do
    chr dkms build -m rdma-probe -v 1.0 -k "$k"
done
chr dkms install -m rdma-probe -v 1.0 -k "$(echo "$kernels" | head -n 1)"
chr dkms status
