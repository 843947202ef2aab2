#!/usr/bin/env bash
# The VM image of the real-kernel tier, built once and cached by its recipe:
# a minimal Debian bookworm (mmdebstrap --variant=apt) booting systemd as PID 1
# (the agent's package runs under its shipped unit there), with Debian's kernel
# and its modules (rdma_rxe: Soft-RoCE), rdma-core, perftest, runc and containerd;
# a second, newer kernel from bookworm-backports, and Debian's dkms with a tiny
# module built and installed for both (tests/vm/customize.sh). An ext4 image next
# to each kernel and initrd that boot it.
#
#   tests/vm/image.sh  -> prints the cache directory: rootfs.ext4, RELEASES (the
#                         kernel releases, oldest first: the first boot boots the
#                         first, bookworm's), vmlinuz-<release>, initrd.img-<release>
#
# Needs root, mmdebstrap and e2fsprogs, and a Debian mirror on first use (~8 min).
set -euo pipefail
# Stdout carries exactly one line, the image directory (run.sh reads it): every
# tool below writes to stderr, whatever it prints (mkfs.ext4 -q still says
# "Creating regular file ..." on a first build).
exec 3>&1 1>&2

CACHE=${RDMA_AGENT_VM_CACHE:-/var/cache/rdma-node-agent/vm}
SUITE=bookworm
PACKAGES=(
    # systemd as PID 1, the system bus the agent asks it over, curl for its
    # endpoints, as on a node.
    systemd systemd-sysv dbus curl
    linux-image-amd64 kmod mount iproute2 procps
    rdma-core ibverbs-providers ibverbs-utils perftest
    # A container from the agent's base OCI spec (runc), and the containerd whose
    # config the agent edits and validates (`containerd config dump`).
    runc containerd jq
    # The DKMS gate across a reboot into a newer kernel: headers for bookworm's
    # kernel here, the newer kernel and its headers in customize.sh.
    linux-headers-amd64 dkms
)
# Bump when the recipe below changes (init, hooks), so old images are not reused.
RECIPE=vm-5

here=$(cd "$(dirname "$0")" && pwd)
key=$( { echo "$RECIPE $SUITE"; printf '%s\n' "${PACKAGES[@]}"; cat "$here/vm-guest" "$here"/vm-guest*.service "$here/customize.sh" "$here"/../fixtures/dkms/rdma-probe/*; } \
    | sha256sum | cut -c1-16)
dir="$CACHE/$SUITE-$key"
# A complete image only ever appears by rename, so its presence is enough.
if [ -f "$dir/rootfs.ext4" ]; then
    echo "$dir" >&3
    exit 0
fi

[ "$(id -u)" = 0 ] || { echo "image.sh: building the VM image needs root" >&2; exit 1; }
for tool in mmdebstrap mkfs.ext4; do
    command -v "$tool" >/dev/null || { echo "image.sh: $tool is not installed: run scripts/test.sh" >&2; exit 1; }
done
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$dir/rootfs.ext4" ]; then echo "$dir" >&3; exit 0; fi

start=$(date +%s)
tmp="$CACHE/.build-$key"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
include=$(IFS=,; echo "${PACKAGES[*]}")
# The newer kernel (a backports release: `+deb12`) without the module trees no
# test VM loads: 40% fewer modules for the guest's depmod (under TCG) to read.
# Bookworm's kernel, which boots first, stays as its package has it.
NEWER_KERNEL_EXCLUDES=()
for d in sound drivers/media drivers/net/wireless net/wireless net/mac80211 drivers/bluetooth \
    net/bluetooth drivers/iio drivers/comedi drivers/staging drivers/isdn; do
    NEWER_KERNEL_EXCLUDES+=("--dpkgopt=path-exclude=/lib/modules/*+*/kernel/$d/*")
done
# Documentation and locales are a third of a minimal system and nothing reads them.
mmdebstrap --variant=apt --format=directory --include="$include" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${NEWER_KERNEL_EXCLUDES[@]}" \
    --customize-hook='rm -f "$1/etc/hostname"' \
    --customize-hook="$here/customize.sh"' "$1"' \
    "$SUITE" "$tmp/root" >"$tmp/mmdebstrap.log" 2>&1 \
    || { tail -n 30 "$tmp/mmdebstrap.log" >&2; echo "image.sh: mmdebstrap failed (is deb.debian.org reachable?)" >&2; exit 1; }
# The guest runner (tests/vm/vm-guest) and its two units, enabled.
install -m 0755 "$here/vm-guest" "$tmp/root/usr/local/sbin/vm-guest"
mkdir -p "$tmp/root/etc/systemd/system/multi-user.target.wants"
for u in vm-guest-early.service vm-guest.service; do
    install -m 0644 "$here/$u" "$tmp/root/etc/systemd/system/$u"
    ln -sf "/etc/systemd/system/$u" "$tmp/root/etc/systemd/system/multi-user.target.wants/$u"
done
ln -sf /lib/systemd/system/multi-user.target "$tmp/root/etc/systemd/system/default.target"
# Nothing logs in, and nothing runs that a test did not ask for: no getty on the
# console; no apt timers; no `dkms autoinstall` at boot (the DKMS gate's newer
# kernel build waits for the guest's own `dkms install`, tests/vm/customize.sh).
for u in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer \
    apt-daily-upgrade.timer dkms.service e2scrub_reap.service; do
    ln -sf /dev/null "$tmp/root/etc/systemd/system/$u"
done
echo rxe-vm >"$tmp/root/etc/hostname"
# The root is mounted read-write by the kernel (root=/dev/vda rw): no fstab
# entry for systemd to wait on a device unit for.
: >"$tmp/root/etc/fstab"
# The kernels and initrds boot the VM from outside (-kernel/-initrd); the guest
# keeps its copies in /boot, as a node has them.
ls "$tmp/root/boot" | sed -n 's/^vmlinuz-//p' | sort -V >"$tmp/RELEASES"
[ "$(wc -l <"$tmp/RELEASES")" = 2 ] \
    || { echo "image.sh: expected two kernels in /boot, found: $(cat "$tmp/RELEASES")" >&2; exit 1; }
while read -r k; do
    cp "$tmp/root/boot/vmlinuz-$k" "$tmp/root/boot/initrd.img-$k" "$tmp/"
done <"$tmp/RELEASES"
size_mb=$(( $(du -sm "$tmp/root" | cut -f1) + 768 ))
mkfs.ext4 -q -F -L rxe-root -d "$tmp/root" "$tmp/rootfs.ext4" "${size_mb}M"
rm -rf "$tmp/root"
{ echo "recipe $RECIPE suite $SUITE"; printf '%s\n' "${PACKAGES[@]}"; cat "$tmp/RELEASES"; date -u; } >"$tmp/KEY"
trap - EXIT
mv "$tmp" "$dir"
echo "image.sh: built $dir in $(( $(date +%s) - start )) s"
echo "$dir" >&3
