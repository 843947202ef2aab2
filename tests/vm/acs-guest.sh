#!/bin/sh
# The ACS tier, inside the VM (the payload's guest.sh for tests/vm_acs.rs).
# QEMU (q35, an emulated Intel IOMMU, `intel_iommu=on`, so the kernel turns ACS
# on as it does on a node with an IOMMU) gives:
#   root port rp1 -> switch upstream port -> downstream port 1 -> e1000e "gpu0"
#                                         -> downstream port 2 -> e1000e "nic"
#   root port rp2 -> e1000e "gpu1"
#   root port rp3 (empty: a control the fix must not touch)
# QEMU cannot emulate a GPU or an RDMA NIC: the two "gpu" functions' vendor and
# class files are bind-mounted over with NVIDIA's (0x10de, 0x030200), and a tmpfs
# over /sys/class/infiniband holds mlx5_0 whose device link leads to the "nic"
# function. Everything else, config space above all, is the real kernel's.
# Each step leaves NAME.out/.err/.rc under /results; tests/vm_acs.rs asserts.
#
# Boot 1: ACS as the kernel set it; check; plan and apply with acs = "disable";
#   ACS after; check; revert; ACS after; apply again; asks for a reboot.
# Boot 2: ACS is back; the daemon (serve) clears it again; revert at the end.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The boot count, `step` and the results disk (tests/vm/steps.sh).
. "$(dirname "$0")/steps.sh"
AGENT=/payload/rdma-node-agent
CONF=/etc/rdma-node-agent/config.toml

# setpci from the host's pciutils (the image has none), with its libpci.
setpci() { LD_LIBRARY_PATH=/payload/lib /payload/setpci "$@"; }

# Every PCI bridge with its ACS control register, as setpci reads it from the
# kernel: "BDF VALUE", or "BDF none" without an ACS capability.
acs_table() {
    for d in /sys/bus/pci/devices/*; do
        case $(cat "$d/class") in 0x0604*) ;; *) continue ;; esac
        b=$(basename "$d")
        v=$(setpci -s "$b" ECAP_ACS+6.w 2>/dev/null) || v=none
        echo "$b ${v:-none}"
    done
}

# The functions, by where they are (see the top).
pci_layout() {
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/vendor"):$(cat "$d/device")" = 0x8086:0x10d3 ] || continue
        real=$(readlink -f "$d")
        # pci0000:00/RP/USP/DSP/EP has four functions on the way; RP/EP two.
        n=$(echo "${real#/sys/devices/}" | tr '/' '\n' | grep -c ':.*\.')
        echo "$n $(basename "$d") $real"
    done | sort
}

identities() {
    layout=$(pci_layout)
    echo "$layout" >"$R/layout-boot$boot.txt"
    gpu0=$(echo "$layout" | awk '$1 == 4 { print $3; exit }')
    nic=$(echo "$layout" | awk '$1 == 4 { p = $3 } END { print p }')
    gpu1=$(echo "$layout" | awk '$1 == 2 { print $3; exit }')
    [ -n "$gpu0" ] && [ -n "$nic" ] && [ -n "$gpu1" ] && [ "$gpu0" != "$nic" ] \
        || { echo "unexpected PCI layout: $layout"; return 1; }
    mkdir -p /run/ident
    echo 0x10de >/run/ident/vendor
    echo 0x030200 >/run/ident/class
    for g in "$gpu0" "$gpu1"; do
        mount --bind /run/ident/vendor "$g/vendor" || return 1
        mount --bind /run/ident/class "$g/class" || return 1
    done
    # /sys/class/infiniband exists once ib_core is loaded; an empty tmpfs over it.
    modprobe ib_core || return 1
    mount -t tmpfs -o mode=0755 tmpfs /sys/class/infiniband || return 1
    mkdir /sys/class/infiniband/mlx5_0
    ln -s "../../..${nic#/sys}" /sys/class/infiniband/mlx5_0/device
    echo "gpu0 $(basename "$gpu0")"
    echo "gpu1 $(basename "$gpu1")"
    echo "nic $(basename "$nic")"
}

config() {
    mkdir -p "$(dirname "$CONF")"
    # Only gpudirect.path acts: the other concerns would edit containerd, systemd
    # and the kernel records of this throwaway guest.
    printf '%s\n' '[containerd]' 'enabled = false' '[systemd]' 'enabled = false' \
        '[http]' 'enabled = false' '[rdma]' 'enabled = false' '[kernel]' 'enabled = false' \
        '[kubelet]' 'enabled = false' '[gpudirect]' "acs = \"$1\"" >"$CONF"
}

step "boot$boot-identities" identities
cat /proc/sys/kernel/random/boot_id >"$R/boot$boot-boot_id"
cat /proc/cmdline >"$R/boot$boot-cmdline"
step "boot$boot-acs-before" acs_table

if [ "$boot" = 1 ]; then
    config report
    step check-report "$AGENT" check --json --only gpudirect.path
    config disable
    step plan "$AGENT" plan --json
    step apply "$AGENT" apply --json
    step acs-after-apply acs_table
    step check-after-apply "$AGENT" check --json --only gpudirect.path
    step record-after-apply cat /var/lib/rdma-node-agent/gpudirect-acs.json
    step revert "$AGENT" revert --json
    step acs-after-revert acs_table
    step record-after-revert ls /var/lib/rdma-node-agent
    step apply-again "$AGENT" apply --json
    step acs-after-apply-again acs_table
    : >"$R/reboot"
else
    config disable
    step record-before-daemon cat /var/lib/rdma-node-agent/gpudirect-acs.json
    # The daemon as a node runs it: its first reconcile applies; wait for the
    # registers (under TCG a cycle takes seconds), then stop it.
    "$AGENT" serve >"$R/serve.out" 2>"$R/serve.err" &
    pid=$!
    zeros() { acs_table | awk '$2 == "0000"' | wc -l; }
    z0=$(zeros)
    i=0
    while [ $i -lt 120 ] && [ "$(zeros)" -le "$z0" ]; do
        i=$((i + 1))
        sleep 1
    done
    # The other bridges' effects follow within the same reconcile.
    sleep 5
    kill -TERM "$pid"
    wait "$pid"
    echo $? >"$R/serve.rc"
    echo "$i" >"$R/serve-waited"
    step acs-after-daemon acs_table
    step record-after-daemon cat /var/lib/rdma-node-agent/gpudirect-acs.json
    step revert2 "$AGENT" revert --json
    step acs-after-revert2 acs_table
fi
