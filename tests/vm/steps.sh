# Sourced by each VM tier's guest script (tests/vm/guest.sh, acs-guest.sh),
# from the payload, with the phase as the script's $1 (tests/vm/vm-guest runs
# it twice a boot): `early`, before the agent's unit starts at boot, counts
# the boot; `main`, once the system is up, writes the results disk at its end.
# Every step leaves NAME.out, NAME.err and NAME.rc under /results, and its
# guest seconds in /results/times; at each poweroff the results go to the third
# disk as a tar (tests/vm/run.sh reads it back).
R=/results
PHASE=${1:-main}
mkdir -p "$R" /var/lib/vm-test
if [ "$PHASE" = early ]; then
    boot=$(($(cat /var/lib/vm-test/boot 2>/dev/null || echo 0) + 1))
    echo "$boot" >/var/lib/vm-test/boot
    cut -d' ' -f1 /proc/uptime >"$R/boot$boot-init-uptime"
    rm -f "$R/reboot"
else
    boot=$(cat /var/lib/vm-test/boot)
    cut -d' ' -f1 /proc/uptime >"$R/boot$boot-main-uptime"
fi

# The agent as installed: the package's binary, run by the tier's steps.
AGENT=/usr/bin/rdma-node-agent
# Installs the payload's .deb with dpkg, $1 the config the operator put in
# place first (kept: it exists before the package's conffile). The unit is
# enabled; it is not started here (a policy-rc.d that denies it, which the
# package's postinst honours): the steps start it with systemctl, and it
# starts at every later boot.
install_agent() {
    mkdir -p /etc/rdma-node-agent
    printf '%s\n' "$1" >/etc/rdma-node-agent/config.toml
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    dpkg --force-confdef --force-confold -i /payload/rdma-node-agent.deb
    rc=$?
    rm -f /usr/sbin/policy-rc.d
    echo "enabled: $(systemctl is-enabled rdma-node-agent) active: $(systemctl is-active rdma-node-agent)"
    return $rc
}
# The unit's journal since this boot, messages only.
unit_journal() { journalctl -b -u rdma-node-agent --no-pager -o cat; }
# GET on the daemon's listener (the unit's default, loopback): the body.
http_get() { curl -s --max-time 10 "http://127.0.0.1:9470$1"; }

up() { cut -d' ' -f1 /proc/uptime; }
# step NAME COMMAND...: runs it, recording its output, exit code and duration.
step() {
    name=$1
    shift
    s=$(up)
    "$@" >"$R/$name.out" 2>"$R/$name.err"
    echo $? >"$R/$name.rc"
    e=$(up)
    awk -v n="$name" -v s="$s" -v e="$e" 'BEGIN { printf "%-40s %6.1f s\n", n, e - s }' | tee -a "$R/times"
}
sh_step() {
    name=$1
    shift
    step "$name" sh -c "$*"
}
finish() {
    trap - EXIT
    dmesg >"$R/dmesg-boot$boot.txt"
    journalctl -b --no-pager -o short-monotonic >"$R/journal-boot$boot.txt" 2>&1
    up >"$R/boot$boot-end-uptime"
    echo "$boot" >"$R/boots"
    tar -cf /dev/vdc -C "$R" .
    sync
}
[ "$PHASE" = early ] || trap finish EXIT
