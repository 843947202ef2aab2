#!/usr/bin/env bash
# Boots the test VM on a payload and collects its results.
#
#   tests/vm/run.sh PAYLOAD_DIR RESULTS_DIR
#
# PAYLOAD_DIR holds guest.sh (run by the image's tests/vm/vm-guest, from two
# oneshot units of the guest's systemd) and whatever it needs (the agent's
# .deb); it reaches the guest as a tar on a second disk, so a new build needs
# no new image. The guest writes a tar of its /results to a third
# disk at each poweroff; it lands in RESULTS_DIR. When the guest leaves a file
# `reboot` there, the same disk is booted again (up to VM_BOOTS times): state on
# the root disk survives, as on a rebooted node. Each run boots a fresh qcow2
# overlay of the cached image, which is never modified.
#
# Which kernel: the first boot boots the image's oldest (bookworm's, RELEASES'
# first line). The kernel boots from outside the disk (-kernel/-initrd), so QEMU
# is the boot loader: a reboot into another installed kernel is the guest naming
# its release in `reboot` (as `grub-reboot` picks a node's next entry) and this
# loop booting that kernel's vmlinuz and initrd, both copies of the guest's own
# /boot files, on the same disk. An empty `reboot` boots the same kernel again.
#
# TCG, 1 vCPU, 2 GiB: KVM cannot boot a stock kernel on the CI machines (the guest
# hangs after "Probing EDD"). RDMA_AGENT_VM_ACCEL=kvm tries it anyway. VM_SMP=N
# gives the guest N vCPUs, each its own host thread (multi-threaded TCG): the
# fabric tier, whose four daemons would otherwise share one vCPU, runs alone.
#
# VM_QEMU_ARGS (split on blanks) adds machine and device options, VM_APPEND words
# to the kernel command line: tests/vm_acs.rs boots a q35 machine with PCIe root
# ports, a switch and an IOMMU that way. Unset, the machine is the rxe tier's.
#
# VM_INJECT names a host-side helper in tests/vm (aer-inject.sh): the monitor
# is then a pipe chardev instead of none, and the helper runs beside QEMU for
# each boot as `VM_INJECT MONITOR CONSOLE_LOG RESULTS/inject-BOOT.log`, reading
# the guest's requests from its serial console (tests/vm_acs.rs injects AER
# errors that way).
set -euo pipefail

payload=${1:?usage: run.sh PAYLOAD_DIR RESULTS_DIR}
results=${2:?usage: run.sh PAYLOAD_DIR RESULTS_DIR}
here=$(cd "$(dirname "$0")" && pwd)
accel=${RDMA_AGENT_VM_ACCEL:-tcg}
smp=${VM_SMP:-1}
max_boots=${VM_BOOTS:-3}
# Boot 1 of the whole tier takes about 9 minutes under TCG beside the rest of
# the suite on 2 cores (NRI's containerd alone 2): 20 is a hung guest.
boot_limit=${VM_BOOT_LIMIT:-1200}

fail() { echo "vm: $*" >&2; exit 1; }
[[ "$smp" =~ ^[1-8]$ ]] || fail "VM_SMP=$smp: a vCPU count from 1 to 8"
if [ "$accel" = tcg ] && [ "$smp" -gt 1 ]; then accel=tcg,thread=multi; fi
for tool in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils tar:tar; do
    command -v "${tool%%:*}" >/dev/null \
        || fail "${tool%%:*} is not installed (Debian package ${tool##*:}): run scripts/test.sh, or RDMA_AGENT_VM=0 to turn the VM tier off"
done
[ -x "$payload/guest.sh" ] || fail "$payload/guest.sh is missing or not executable"

t0=$(date +%s)
image=$("$here/image.sh") || fail "cannot build the VM image (see above)"
[ -f "$image/rootfs.ext4" ] && [ -f "$image/RELEASES" ] \
    || fail "tests/vm/image.sh printed '$image', which is not an image directory (rootfs.ext4, RELEASES)"
t_image=$(( $(date +%s) - t0 ))

work=$(mktemp -d /var/tmp/rdma-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
qemu-img create -q -f qcow2 -F raw -b "$image/rootfs.ext4" "$work/root.qcow2"
tar -C "$payload" -cf "$work/payload.tar" .
mkdir -p "$results"
kernel=$(head -n 1 "$image/RELEASES")

read -r -a extra <<<"${VM_QEMU_ARGS:-}"
inject=
if [ -n "${VM_INJECT:-}" ]; then
    inject="$here/$VM_INJECT"
    [ -x "$inject" ] || fail "VM_INJECT=$VM_INJECT: $inject is not an executable"
    mkfifo "$work/mon.in" "$work/mon.out"
    monitor=(-chardev "pipe,id=mon,path=$work/mon" -mon chardev=mon,mode=readline)
else
    monitor=(-monitor none)
fi
boot=0
while :; do
    boot=$((boot + 1))
    truncate -s 0 "$work/results.img"
    truncate -s 512M "$work/results.img"
    tb=$(date +%s)
    # -no-reboot: a panic or a reboot ends QEMU; this loop does the reboots.
    status=0
    helper=
    if [ -n "$inject" ]; then
        : >"$results/console-$boot.log"
        "$inject" "$work/mon" "$results/console-$boot.log" "$results/inject-$boot.log" &
        helper=$!
    fi
    nice -n 5 timeout --kill-after=10 "$boot_limit" qemu-system-x86_64 \
        -accel "$accel" -cpu max -smp "$smp" -m 2048 \
        -nodefaults -display none -no-reboot "${monitor[@]}" \
        -serial "file:$results/console-$boot.log" \
        -kernel "$image/vmlinuz-$kernel" -initrd "$image/initrd.img-$kernel" \
        -append "root=/dev/vda rw console=ttyS0 panic=-1 init=/lib/systemd/systemd${VM_APPEND:+ $VM_APPEND}" \
        ${extra[@]+"${extra[@]}"} \
        -drive "file=$work/root.qcow2,format=qcow2,if=virtio" \
        -drive "file=$work/payload.tar,format=raw,if=virtio,readonly=on" \
        -drive "file=$work/results.img,format=raw,if=virtio" \
        || status=$?
    if [ -n "$helper" ]; then
        kill "$helper" 2>/dev/null
        wait "$helper" 2>/dev/null || true
    fi
    secs=$(( $(date +%s) - tb ))
    [ "$status" = 124 ] && fail "boot $boot did not power off within ${boot_limit} s (console: $results/console-$boot.log)"
    [ "$status" = 0 ] || fail "qemu-system-x86_64 failed (exit $status) in boot $boot: $(tail -n 5 "$results/console-$boot.log" 2>/dev/null)"
    rm -f "$results/reboot"
    # An all-zero disk is an empty tar: the guest's own count tells a finished boot.
    tar -xf "$work/results.img" -C "$results" 2>/dev/null || true
    [ "$(cat "$results/boots" 2>/dev/null)" = "$boot" ] \
        || fail "boot $boot left no results (console: $results/console-$boot.log): $(tail -n 5 "$results/console-$boot.log")"
    echo "vm: boot $boot ($kernel): ${secs} s in QEMU ($accel)" >&2
    echo "$secs" >"$results/qemu-seconds-$boot"
    [ -e "$results/reboot" ] || break
    [ "$boot" -lt "$max_boots" ] || fail "the guest asked for boot $((boot + 1)); at most $max_boots"
    next=$(cat "$results/reboot")
    if [ -n "$next" ]; then
        grep -qxF -- "$next" "$image/RELEASES" \
            || fail "the guest asked to reboot into kernel $next; the image has $(tr '\n' ' ' <"$image/RELEASES")"
        kernel=$next
    fi
done
echo "vm: image ${t_image} s, total $(( $(date +%s) - t0 )) s for $boot boot(s)" >&2
