# driver.health's steps of the Soft-RoCE tier (sourced by tests/vm/guest.sh;
# uses its step/http_get/reconciles helpers and the daemon its link steps run).
# netdevsim, built for the guest's kernel by the image (tests/vm/customize.sh),
# gives a devlink instance with health reporters and debugfs test triggers
# (tools/testing/selftests/drivers/net/netdevsim/devlink.sh): the daemon,
# under its installed unit, watches it (`also_watch`), reads the kernel log
# (through its kernel-log helper unit: the daemon's own unit hides /dev/kmsg),
# and its /status says ok; then the dummy reporter is broken with recovery
# failing, and /status must say fail naming the instance and the reporter.
NSIM=netdevsim/netdevsim10
NSIM_DEBUG=/sys/kernel/debug/netdevsim/netdevsim10
driver_status() { http_get /status | jq -c '.checks[] | select(.id == "driver.health")'; }
nsim_up() {
    modprobe netdevsim || return 1
    echo "10 1" >/sys/bus/netdevsim/new_device || return 1
    # iproute2 6.1's devlink wants a reporter name after a device: all of them.
    devlink health show
}
driver_watch() {
    cp /etc/rdma-node-agent/config.toml /var/lib/vm-test/config-before-driver.toml
    printf '[driver_health]\nalso_watch = ["%s"]\n' "$NSIM" >>/etc/rdma-node-agent/config.toml
    before=$(reconciles)
    agent_restart || return 1
    i=0
    until [ -n "$(reconciles)" ]; do
        i=$((i + 1))
        [ $i -lt 300 ] || { echo "the daemon did not answer in 60 s"; return 1; }
        sleep 0.2
    done
    echo "reconciles before restart: $before"
    systemctl show -p CapabilityBoundingSet -p ProtectKernelLogs -p DeviceAllow rdma-node-agent
}
nsim_break() {
    echo 1 >"$NSIM_DEBUG/health/fail_recover" || return 1
    # The write fails (EIO) when the recovery the report triggers fails, as
    # fail_recover asks: the reporter is then in error state, shown below.
    echo "rdma-node-agent VM tier" >"$NSIM_DEBUG/health/break_health" || echo "break_health: the recovery failed, as asked"
    devlink health show "$NSIM" reporter dummy
    n=$(reconciles)
    systemctl reload rdma-node-agent || return 1
    wait_reconciles_above "$n"
}
driver_metrics() { http_get /metrics | grep -E '^rdma_node_agent_driver_'; }
# The daemon's unit cannot read /dev/kmsg: its kernel-log helper units did.
helper_journal() {
    journalctl -b --no-pager -o short -u 'rdma-node-agent-kernel-log-*' | tail -n 6
    systemctl show -p ProtectKernelLogs -p CapabilityBoundingSet rdma-node-agent
}
# A line root writes into /dev/kmsg: the kernel files it under LOG_USER, and
# the agent must not take it for the driver's (driver-before stays ok).
forge_mlx5_line() {
    echo "<3>mlx5_core 0000:00:00.0: poll_health:1:(pid 0): device's health compromised - reached miss count" >/dev/kmsg
    dmesg -x | grep -F "health compromised"
}
driver_health_steps() {
    step driver-nsim-up nsim_up
    step driver-forged forge_mlx5_line
    step driver-watch driver_watch
    step driver-before driver_status
    step driver-helper helper_journal
    step driver-break nsim_break
    step driver-after driver_status
    step driver-metrics driver_metrics
    step driver-journal unit_journal
}
# The config as the link steps had it (netdevsim is gone after a reboot).
driver_unwatch() {
    systemctl stop rdma-node-agent
    cp /var/lib/vm-test/config-before-driver.toml /etc/rdma-node-agent/config.toml
    echo 0 >"$NSIM_DEBUG/health/fail_recover"
    echo 10 >/sys/bus/netdevsim/del_device
    modprobe -r netdevsim
}
