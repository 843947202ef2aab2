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

# netdevsim for driver.health's proof (devlink health reporters with test
# triggers in debugfs): Debian builds its kernel with `# CONFIG_NETDEVSIM is not
# set`, so the module is built here, out of tree, from Debian's own source of the
# kernel the Soft-RoCE tier boots (the oldest: bookworm's), the linux-source
# package of the same version as its linux-image, only drivers/net/netdevsim
# taken out of the tarball; the tarball is purged again (150 MB).
boot=$(echo "$kernels" | head -n 1)
series=$(echo "$boot" | cut -d. -f1,2)
chr apt-get install -y -q --no-install-recommends "linux-source-$series"
image_version=$(chr dpkg-query -W -f='${Version}' "linux-image-$boot")
source_version=$(chr dpkg-query -W -f='${Version}' "linux-source-$series")
[ "$image_version" = "$source_version" ] || {
    echo "customize.sh: linux-source-$series $source_version does not match linux-image-$boot $image_version" >&2
    exit 1
}
rm -rf "$root/tmp/netdevsim-src"
mkdir -p "$root/tmp/netdevsim-src"
tar -xaf "$root/usr/src/linux-source-$series.tar.xz" -C "$root/tmp/netdevsim-src" \
    --strip-components=4 "linux-source-$series/drivers/net/netdevsim"
chr apt-get purge -y -q "linux-source-$series"
chr make -s -C "/lib/modules/$boot/build" M=/tmp/netdevsim-src CONFIG_NETDEVSIM=m modules
install -D -m 0644 "$root/tmp/netdevsim-src/netdevsim.ko" "$root/lib/modules/$boot/extra/netdevsim.ko"
rm -rf "$root/tmp/netdevsim-src"
chr depmod "$boot"
chr modinfo -k "$boot" netdevsim | grep -E '^(filename|vermagic)'
