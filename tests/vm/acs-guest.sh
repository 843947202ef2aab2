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
#   again; its journal and /status; stopped; revert at the end. Then AER: the
#   unit started again with [pcie] correctable_threshold = 3; pcie.aer ok on a
#   clean boot; errors injected into the emulated devices by QEMU's monitor
#   (tests/vm/aer-inject.sh on the host, asked over the serial console): one
#   non-fatal Unsupported Request on the switch port above the "nic"; four
#   correctable Receiver Errors on the "nic" through the kernel's aer_inject
#   (QEMU sends no correctable message up); one fatal Data Link Protocol error
#   on the root port above "gpu1"; after each, the guest kernel's counters and
#   the unit's pcie.aer verdict.
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

# Every PCI function's AER totals, correctable nonfatal fatal ("none": no
# statistics), and a root port's aer_rootport_total_err_* after a slash.
total() { awk '/^TOTAL_ERR_/ { print $2 }' "/sys/bus/pci/devices/$1/$2"; }
aer_counts() {
    for d in /sys/bus/pci/devices/*; do
        b=$(basename "$d")
        if [ -e "$d/aer_dev_correctable" ]; then
            line="$b $(total "$b" aer_dev_correctable) $(total "$b" aer_dev_nonfatal) $(total "$b" aer_dev_fatal)"
        else
            line="$b none"
        fi
        [ -e "$d/aer_rootport_total_err_cor" ] \
            && line="$line / $(cat "$d/aer_rootport_total_err_cor" "$d/aer_rootport_total_err_nonfatal" "$d/aer_rootport_total_err_fatal" | tr '\n' ' ')"
        echo "$line"
    done
}

# kinject BDF COR_STATUS: a correctable error on BDF through the kernel's own
# AER injector (aer_inject, CONFIG_PCIEAER_INJECT=m): it fakes the function's
# and its root port's AER registers and runs the AER driver's handling, which
# counts it as a real one. QEMU cannot: its pcie_aer_msg_alldev()
# (hw/pci/pcie_aer.c) sends only uncorrectable messages up, so a correctable
# error injected from the monitor never reaches the root port. The write is a
# struct aer_error_inj (drivers/pci/pcie/aer_inject.c): bus,
# dev, fn (u8), a pad byte, uncor_status, cor_status, four header words,
# domain (u32, little-endian). Prints the function's file after.
oct() { printf '\\%03o' "$1"; }
le32() { oct $(($1 & 255)); oct $((($1 >> 8) & 255)); oct $((($1 >> 16) & 255)); oct $((($1 >> 24) & 255)); }
kinject() {
    bdf=$1 dom=${1%%:*} rest=${1#*:}
    bus=${rest%%:*} rest=${rest#*:}
    slot=${rest%%.*} fn=${rest#*.}
    before=$(total "$bdf" aer_dev_correctable)
    modprobe aer_inject || return 1
    # shellcheck disable=SC2059 # the format is the struct's bytes
    printf "$(oct $((0x$bus)))$(oct $((0x$slot)))$(oct "$fn")$(oct 0)$(le32 0)$(le32 "$2")$(le32 0)$(le32 0)$(le32 0)$(le32 0)$(le32 $((0x$dom)))" \
        >/dev/aer_inject || return 1
    t0=$(up)
    while [ "$(total "$bdf" aer_dev_correctable)" = "$before" ]; do
        awk -v t0="$t0" -v t="$(up)" 'BEGIN { exit !(t - t0 < 20) }' \
            || { echo "$bdf aer_dev_correctable stayed at $before for 20 s after aer_inject"; return 1; }
        sleep 0.5
    done
    echo "$bdf aer_dev_correctable TOTAL $before -> $(total "$bdf" aer_dev_correctable)"
    cat "/sys/bus/pci/devices/$bdf/aer_dev_correctable"
}

# inject BDF FILE ARGS...: asks the host (tests/vm/aer-inject.sh) to run
# `pcie_aer_inject_error ARGS` and waits (20 s at most) until the guest
# kernel's TOTAL in BDF's FILE rises; prints the file after.
inject_seq=0
inject() {
    bdf=$1 file=$2
    shift 2
    before=$(total "$bdf" "$file")
    inject_seq=$((inject_seq + 1))
    echo "rdma-vm-inject $inject_seq $* end" >/dev/ttyS0
    t0=$(up)
    while [ "$(total "$bdf" "$file")" = "$before" ]; do
        awk -v t0="$t0" -v t="$(up)" 'BEGIN { exit !(t - t0 < 20) }' \
            || { echo "$bdf $file stayed at $before for 20 s after asking for: $*"; return 1; }
        sleep 0.5
    done
    echo "$bdf $file TOTAL $before -> $(total "$bdf" "$file")"
    cat "/sys/bus/pci/devices/$bdf/$file"
}

# The unit's pcie.aer once it matches the jq condition $1 (30 s at most, by
# the clock; a reload asks the daemon for a reconcile each time round).
aer_wait() {
    t0=$(up)
    while :; do
        got=$(http_get /status | jq -c '.checks[] | select(.id == "pcie.aer")')
        echo "$got" | jq -e "$1" >/dev/null 2>&1 && break
        awk -v t0="$t0" -v t="$(up)" 'BEGIN { exit !(t - t0 < 30) }' \
            || { echo "pcie.aer did not come to $1 in 30 s: $got"; return 1; }
        systemctl reload rdma-node-agent
        sleep 2
    done
    echo "$got"
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
    # AER, on the unit as installed (report mode: nothing else changes).
    nic_bdf=$(awk '$1 == "nic" { print $2 }' "$R/boot$boot-identities.out")
    gpu1_bdf=$(awk '$1 == "gpu1" { print $2 }' "$R/boot$boot-identities.out")
    { config_text report report; printf '%s\n' '[pcie]' 'correctable_threshold = 3'; } >"$CONF"
    step aer-counts-clean aer_counts
    # Uncorrectable errors from QEMU go to the emulated ports, whose error
    # reporting the kernel turns on: QEMU's e1000e has no writable reporting
    # enables (its DevCtl reads 0x0000 even after a write), so an error
    # injected into it is never signalled.
    dsp2_bdf=$(basename "$(dirname "$(readlink -f "/sys/bus/pci/devices/$nic_bdf")")")
    rp2_bdf=$(basename "$(dirname "$(readlink -f "/sys/bus/pci/devices/$gpu1_bdf")")")
    echo "$dsp2_bdf $rp2_bdf" >"$R/aer-ports"
    step aer-unit-start systemctl start rdma-node-agent
    step aer-clean aer_wait '.status == "ok"'
    # QEMU's first (aer_inject, once loaded, answers the AER registers of the
    # root port it injected through from its own records: a real error below
    # that port would then go unseen until it is unloaded).
    step aer-inject-nonfatal inject "$dsp2_bdf" aer_dev_nonfatal dsp2 0x100000
    step aer-nonfatal aer_wait '.status == "warn" and .reason == "aer_nonfatal"'
    for i in 1 2 3 4; do
        step "aer-inject-cor$i" kinject "$nic_bdf" 0x1
    done
    step aer-correctable aer_wait '.status == "warn" and (.message | contains("aer_dev_correctable TOTAL_ERR_COR rose by"))'
    step aer-inject-unload rmmod aer_inject
    step aer-inject-fatal inject "$rp2_bdf" aer_dev_fatal rp2 0x10
    step aer-fatal aer_wait '.status == "fail" and .reason == "aer_fatal"'
    step aer-counts-after aer_counts
    sh_step aer-metrics 'curl -s --max-time 10 http://127.0.0.1:9470/metrics | grep -E "pcie_aer|pcie_link_retrained|check_status.*pcie"'
    step aer-history cat /var/lib/rdma-node-agent/pcie-aer-history.json
    step aer-unit-stop systemctl stop rdma-node-agent
    step aer-journal unit_journal
    # The guest kernel's AER files as it wrote them, for tests/fixtures/aer.
    mkdir -p "$R/aer-files"
    for f in aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do
        cp "/sys/bus/pci/devices/$nic_bdf/$f" "$R/aer-files/nic-$f"
        cp "/sys/bus/pci/devices/$dsp2_bdf/$f" "$R/aer-files/dsp2-$f"
        cp "/sys/bus/pci/devices/$rp2_bdf/$f" "$R/aer-files/rp2-$f"
    done
fi
