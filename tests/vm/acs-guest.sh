#!/bin/sh
# The ACS tier, inside the VM (the payload's guest.sh for tests/vm_acs.rs), run
# by tests/vm/vm-guest (systemd is PID 1) as `guest.sh early`, before the
# agent's unit starts at boot, and `guest.sh main` once the system is up.
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
# The agent is the .deb, installed at boot 1 (tests/vm/steps.sh); `check`,
# `plan`, `apply` and `revert` are its binary's, run as an operator does; the
# daemon is its unit (systemctl), read over /status and /readyz and its journal.
#
# Early, each boot: the identities (as a node has its devices before the agent
#   starts), and ACS as the kernel set it.
# Boot 1: the package installed; the unit started in report mode: what its
#   daemon reads of each path (the same as `check`, or it cannot read config
#   space); check; plan and apply with acs = "disable"; ACS after; check;
#   revert; ACS after; apply again; asks for a reboot.
# Boot 2: ACS is back; the unit, started at boot with acs = "disable", clears it
#   again; its journal and /status; stopped; revert at the end.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The boot count, `step` and the results disk (tests/vm/steps.sh).
. "$(dirname "$0")/steps.sh"
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

# Only gpudirect.path acts: the other concerns would edit containerd, systemd
# and the kernel records of this throwaway guest. The unit's listener on.
config_text() {
    printf '%s\n' 'mode = "'"$2"'"' '[containerd]' 'enabled = false' '[systemd]' 'enabled = false' \
        '[rdma]' 'enabled = false' '[kernel]' 'enabled = false' \
        '[kubelet]' 'enabled = false' '[gpudirect]' "acs = \"$1\""
}
config() {
    mkdir -p "$(dirname "$CONF")"
    config_text "$1" "${2:-enforce}" >"$CONF"
}

# The gpudirect.path check of the unit's /status, once a reconcile reported it
# (60 s at most), and /readyz's code.
unit_check() {
    i=0
    until http_get /status | jq -e '.checks[] | select(.id == "gpudirect.path")' >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 300 ] || { echo "no gpudirect.path in the unit's /status after 60 s"; http_get /status; return 1; }
        sleep 0.2
    done
    http_get /status | jq '{checks: [.checks[] | select(.id == "gpudirect.path")], actions, error}'
    echo "readyz $(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://127.0.0.1:9470/readyz)"
}

# Waits (30 s at most) until more bridges read 0000 than at boot (the unit's
# clear, if any, may land after its first report), then 5 s for the rest.
wait_cleared() {
    z0=$(awk '$2 == "0000"' "$R/boot$boot-acs-before.out" | wc -l)
    # By the clock: one reading of every bridge takes seconds under TCG.
    t0=$(up)
    while [ "$(acs_table | awk '$2 == "0000"' | wc -l)" -le "$z0" ] \
        && awk -v t0="$t0" -v t="$(up)" 'BEGIN { exit !(t - t0 < 30) }'; do
        sleep 1
    done
    sleep 5
    awk -v t0="$t0" -v t="$(up)" 'BEGIN { printf "waited %.0f s\n", t - t0 }'
}

if [ "$PHASE" = early ]; then
    # What a node has before the agent starts at boot; ACS as the kernel set it.
    step "boot$boot-identities" identities
    cat /proc/sys/kernel/random/boot_id >"$R/boot$boot-boot_id"
    cat /proc/cmdline >"$R/boot$boot-cmdline"
    step "boot$boot-acs-before" acs_table
    # The record the agent kept from the boot before, as the unit will find it.
    [ "$boot" = 1 ] || step record-before-daemon cat /var/lib/rdma-node-agent/gpudirect-acs.json
    exit 0
fi

if [ "$boot" = 1 ]; then
    step install install_agent "$(config_text report report)"
    # The daemon as installed, in report mode: what it reads of each path.
    step unit-start systemctl start rdma-node-agent
    step unit-report unit_check
    step unit-stop systemctl stop rdma-node-agent
    step unit-journal-report unit_journal
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
    # The unit started at boot (enabled by the package) with acs = "disable"
    # (boot 1's last config): its first reconcile applies. Its report of it,
    # then the registers; stopped as an operator stops it.
    sh_step unit-boot2 'systemctl is-enabled rdma-node-agent; systemctl is-active rdma-node-agent'
    step unit-daemon unit_check
    step unit-cleared wait_cleared
    step unit-stop2 systemctl stop rdma-node-agent
    step unit-journal unit_journal
    step acs-after-daemon acs_table
    step record-after-daemon cat /var/lib/rdma-node-agent/gpudirect-acs.json
    step revert2 "$AGENT" revert --json
    step acs-after-revert2 acs_table
fi
