#!/usr/bin/env bash
# The host side of AER injection (tests/vm_acs.rs): run by tests/vm/run.sh
# beside QEMU when VM_INJECT names it, with QEMU's human monitor on a pipe
# chardev (MONITOR.in / MONITOR.out) and the guest's serial console log.
#
#   aer-inject.sh MONITOR CONSOLE_LOG LOG
#
# The guest asks for each injection by writing a line to its serial console,
#   rdma-vm-inject <seq> <pcie_aer_inject_error arguments>
# (e.g. `rdma-vm-inject 3 -c nic 0x1`, a correctable Receiver Error on the
# device with qdev id `nic`), then waits for its own kernel's AER counters to
# rise. Each seq is injected once, in order, with QEMU's monitor command
# `pcie_aer_inject_error` (hw/pci/pcie_aer.c): the error is recorded in the
# emulated device's AER registers and signalled up to its root port, as
# hardware does. Only that command runs; arguments are words of [-a-z0-9x].
# What was sent and what the monitor answered go to LOG.
set -u
mon=${1:?usage: aer-inject.sh MONITOR CONSOLE_LOG LOG}
console=${2:?usage: aer-inject.sh MONITOR CONSOLE_LOG LOG}
log=${3:?usage: aer-inject.sh MONITOR CONSOLE_LOG LOG}
done_seq=0
# Drain the monitor's answers (QEMU would block on a full pipe) into the log.
cat "$mon.out" >>"$log" &
drain=$!
trap 'kill "$drain" 2>/dev/null' EXIT
while :; do
    if [ -f "$console" ]; then
        # Serial lines end in \r\n; a request is whole once its line ends.
        while read -r seq args; do
            [ "$seq" -gt "$done_seq" ] 2>/dev/null || continue
            if ! printf '%s' "$args" | grep -qxE '[-a-z0-9x ]+'; then
                echo "aer-inject: refused request $seq: $args" >>"$log"
            else
                echo "aer-inject: $seq: pcie_aer_inject_error $args" >>"$log"
                printf 'pcie_aer_inject_error %s\n' "$args" >"$mon.in"
            fi
            done_seq=$seq
        done < <(tr -d '\r' <"$console" | sed -n 's/^.*rdma-vm-inject \([0-9][0-9]*\) \(.*\) end$/\1 \2/p')
    fi
    sleep 0.3
done
