#!/bin/sh
# The real-kernel tier, inside the VM, run by tests/vm/vm-guest (systemd is
# PID 1) as `guest.sh early` before the agent's unit starts at boot and as
# `guest.sh main` once the system is up. Every step leaves NAME.out, NAME.err and NAME.rc under /results; the host
# (tests/vm_rxe.rs) asserts on them. Nothing here decides pass or fail: it only
# does things to a real kernel and records what the kernel and the agent said.
#
# The agent is the .deb installed at boot 1 (tests/vm/steps.sh): `check`,
# `apply` and `revert` are its binary's, run by hand as an operator does; the
# daemon is its unit, started with systemctl (and at each later boot), and read
# over its endpoints.
#
# Boot 1: the package installed; Soft-RoCE up, sysfs captured, rdma.devices and rdma.netns live, the
#   memlock failure and its fixes (setpriv without CAP_IPC_LOCK; the agent's NRI
#   plugin on containerd 2.1 over CRI; runc from the agent's base spec), the
#   live netns switch both ways, and the kernel's EBUSY with each kind of other
#   namespace; ends with exclusive persisted, not live.
# Boot 2: rxe0 created before the unit starts (as a node's device is there);
#   the persisted mode applies at boot (modprobe.d alone); revert; shared
#   again, live. Then the DKMS gate before a reboot into the newer installed
#   kernel (bookworm-backports'): its rdma-probe build not installed, then
#   `dkms install`ed; ends asking for a reboot into that kernel.
# Boot 3, on the newer kernel: kernel.change, kernel.dkms and kernel.modules
#   there, before and after the apply that records the change.
# rdma.link (boots 1 and 2): the unit's daemon counts flaps of rxe0's netdev,
#   by its reconciles and by rtnetlink events between them, across
#   `systemctl restart` and the reboot into boot 2 (where the unit starts at boot).
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The boot count, `step`/`sh_step` and the results disk (tests/vm/steps.sh).
. "$(dirname "$0")/steps.sh"
. "$(dirname "$0")/driver-steps.sh"
# rdma.counters under tc netem (boot 1): tests/vm/counters-steps.sh.
. "$(dirname "$0")/counters-steps.sh"
# The unit's config: the rdma.link daemon's (report mode, below).
CONF=/etc/rdma-node-agent/config.toml
# The netns steps' config, given with --config: the unit's daemon keeps its own.
NCONF=/etc/rdma-node-agent/netns.toml
# The kernel steps' config: the tiny DKMS module is the one required module (the
# default list is Mellanox's), RDMA netns unmanaged.
KCONF=/etc/rdma-node-agent/kernel.toml
# The netns steps' config. The kernel concern is off there: it runs `dkms status`
# (3 s under TCG) in every apply, and kernel_gate checks it with its own config.
config() {
    mkdir -p "$(dirname "$NCONF")"
    printf '[rdma]\nnetns_mode = "%s"\n\n[kernel]\nenabled = false\n' "$1" >"$NCONF"
}
# The kernel frees a dead network namespace asynchronously (cleanup_net): wait
# until a live switch succeeds again (and switch back), so that each blocker is
# tried alone, and its removal is proven to lift the kernel's EBUSY.
settle_netns() {
    i=0
    until rdma system set netns exclusive 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "still EBUSY 20 s after the blocker went away"; return 1; }
        sleep 0.2
    done
    rdma system set netns shared
}
rxe_up() {
    # Loopback: perftest's client and server meet over TCP on 127.0.0.1.
    ip link set lo up || return 1
    modprobe rdma_rxe || return 1
    ip link add veth0 type veth peer name veth1 || return 1
    ip link set veth0 up && ip link set veth1 up || return 1
    rdma link add rxe0 type rxe netdev veth0 || return 1
    i=0
    until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "rxe0 port 1 not ACTIVE after 20 s"; return 1; }
        sleep 0.2
    done
}
live_mode() {
    echo "sysfs $(cat /sys/module/ib_core/parameters/netns_mode)"
    echo "netlink $(rdma system show)"
}

# Copies what the agent reads of rxe0 into a node tree for the fast tests: the
# device as the kernel wrote it, minus the long GID and P_Key tables (entries 0-3
# kept), plus its netdev, the ib_core parameter and the kernel release.
capture_sysfs() {
    out=$1
    dev=$(readlink -f /sys/class/infiniband/rxe0)
    [ -d "$dev" ] || return 1
    # Shell builtins only (read, printf): a fork per file costs ~50 ms under TCG.
    find "$dev" -type d ! -path '*/power' | sed "s|^|$out|" | xargs mkdir -p
    find "$dev" -type l | while IFS= read -r f; do
        ln -s "$(readlink "$f")" "$out$f"
    done
    find "$dev" -type f | while IFS= read -r f; do
        case "$f" in
        */gids/[4-9] | */gids/[0-9][0-9]* | */ndevs/[4-9] | */ndevs/[0-9][0-9]* | \
            */types/[4-9] | */types/[0-9][0-9]* | */pkeys/[1-9]* | */power/*) continue ;;
        esac
        copy_attr "$f" "$out$f"
    done
    mkdir -p "$out/sys/devices/virtual/net/veth0" "$out/sys/class/infiniband" "$out/sys/class/net" \
        "$out/sys/module/ib_core/parameters" "$out/proc/sys/kernel"
    for f in ifindex address operstate mtu type; do
        copy_attr "/sys/devices/virtual/net/veth0/$f" "$out/sys/devices/virtual/net/veth0/$f"
    done
    ln -s "$(readlink /sys/class/infiniband/rxe0)" "$out/sys/class/infiniband/rxe0"
    ln -s "$(readlink /sys/class/net/veth0)" "$out/sys/class/net/veth0"
    copy_attr /sys/module/ib_core/parameters/netns_mode "$out/sys/module/ib_core/parameters/netns_mode"
    copy_attr /proc/sys/kernel/osrelease "$out/proc/sys/kernel/osrelease"
}
# One attribute, line by line. One the kernel refuses to read (EINVAL: an unused
# GID entry's type and netdev) reads as nothing, where every readable attribute
# has at least its newline: it is left out, as the agent finds it unreadable.
copy_attr() {
    { while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done <"$1"; } >"$2" 2>/dev/null
    [ -s "$2" ] || rm -f "$2"
}

# ib_write_bw over rxe0 on loopback: a server, then a client, 5 iterations of
# 8 MiB (perftest's default 5000 would take minutes under TCG). $1 wraps both.
write_bw() {
    wrap=$1
    sh -c "$wrap timeout 60 ib_write_bw -d rxe0 -s 8388608 -n 5 -F" >"$R/bw-server.tmp" 2>&1 &
    server=$!
    sleep 2
    sh -c "$wrap timeout 60 ib_write_bw -d rxe0 -s 8388608 -n 5 -F 127.0.0.1" 2>&1
    rc=$?
    wait $server
    src=$?
    echo "--- server (exit $src) ---"
    cat "$R/bw-server.tmp"
    rm -f "$R/bw-server.tmp"
    [ $rc = 0 ] && [ $src = 0 ]
}
# The way container runtimes run a pod's processes: root, but CAP_IPC_LOCK gone
# from the bounding and inheritable sets (so RLIMIT_MEMLOCK applies to it).
NOLOCK='setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock'

# A runc bundle from the base spec the agent wrote: the spec as is (rlimits,
# capabilities, mounts), with the guest's / as a read-only rootfs, the host's
# network (as a hostNetwork pod) and the uverbs device (as the RDMA device
# plugins add it).
bundle() {
    spec=$1 dir=$2 memlock=${3:-}
    mkdir -p "$dir/rootfs"
    mountpoint -q "$dir/rootfs" || mount --bind / "$dir/rootfs"
    uv=/dev/infiniband/uverbs0
    [ -c $uv ] || { echo "no $uv"; return 1; }
    # jq 1.6 turns 18446744073709551615 (unlimited) into a float that runc
    # rejects: the agent's rlimits go into config.json as the agent wrote them.
    rlimits=$(perl -0777 -ne 'print $1 if /"rlimits"\s*:\s*(\[[^\]]*\])/' "$spec")
    [ -n "$rlimits" ] || { echo "no process.rlimits in $spec"; return 1; }
    jq --arg root "$dir/rootfs" --arg memlock "$memlock" \
        --argjson uvmaj "$((0x$(stat -c %t $uv)))" --argjson uvmin "$((0x$(stat -c %T $uv)))" '
        .root = {path: $root, readonly: true}
        | .process.terminal = false
        | .process.env = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
        | .process.args = ["sh", "-c", "grep \"Max locked memory\" /proc/self/limits; grep Cap /proc/self/status; ib_write_bw -d rxe0 -s 8388608 -n 5 -F >/tmp/server.log 2>&1 & sleep 2; ib_write_bw -d rxe0 -s 8388608 -n 5 -F 127.0.0.1; rc=$?; wait $!; src=$?; echo \"--- server (exit $src) ---\"; cat /tmp/server.log; [ $rc = 0 ] && [ $src = 0 ]"]
        | .mounts += [{destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev"]}]
        | .linux.namespaces |= map(select(.type != "network"))
        | .linux.devices = (.linux.devices // []) + [
            {path: "/dev/infiniband/uverbs0", type: "c", major: $uvmaj, minor: $uvmin, fileMode: 438, uid: 0, gid: 0}]
        | .linux.resources.devices = (.linux.resources.devices // []) + [
            {allow: true, type: "c", major: $uvmaj, minor: $uvmin, access: "rwm"}]
        | if $memlock == "" then .process.rlimits = "@AGENT_RLIMITS@" else
            .process.rlimits = ((.process.rlimits // []) | map(select(.type != "RLIMIT_MEMLOCK"))
                + [{type: "RLIMIT_MEMLOCK", hard: ($memlock | tonumber), soft: ($memlock | tonumber)}])
          end
        ' "$spec" >"$dir/config.tmp" || return 1
    RLIMITS=$rlimits perl -0777 -pe 's/"\@AGENT_RLIMITS\@"/$ENV{RLIMITS}/' "$dir/config.tmp" >"$dir/config.json"
    grep -A3 '"rlimits"' "$dir/config.json"
}

# pods.rdma from the kernel: ib_write_bw's server and client, each in a pod
# container's cgroup (cgroup v2, named as the kubelet's cgroupfs driver names
# them), running for 15 s while the agent checks and iproute2 lists the
# resources. Root keeps CAP_IPC_LOCK: both are fine, and both are found.
RT_POD=/sys/fs/cgroup/kubepods/besteffort/podvm-restrack
rt_container() { printf '%s/%064x' "$RT_POD" "$1"; }
rt_start() {
    for n in 1 2; do mkdir -p "$(rt_container $n)" || return 1; done
    sh -c "echo \$\$ >$(rt_container 1)/cgroup.procs; exec timeout 120 ib_write_bw -d rxe0 -s 65536 -D 15 -F" \
        >"$R/rt-server.log" 2>&1 &
    echo "server $!" >"$R/rt-pids"
    sleep 2
    sh -c "echo \$\$ >$(rt_container 2)/cgroup.procs; exec timeout 120 ib_write_bw -d rxe0 -s 65536 -D 15 -F 127.0.0.1" \
        >"$R/rt-client.log" 2>&1 &
    echo "client $!" >>"$R/rt-pids"
    # Until the kernel lists a protection domain of each.
    i=0
    while [ "$(rdma resource show pd | grep -c ' pid ')" -lt 2 ]; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "no PD of ib_write_bw after 20 s"; return 1; }
        sleep 0.2
    done
    cat "$R/rt-pids"
}
# The kernel's answers to the dumps the agent sends, as bytes (perl is in the
# image; no RDMA tool prints raw messages): the device list, then ctx, pd and
# cm_id on each device. One line per dump: "CMD DEV HEX..." (each HEX one
# datagram), for the parsing tests (tests/fixtures/restrack/).
record_restrack() {
    perl -e '
        use strict;
        socket(my $s, 16, 3, 20) or die "socket: $!";  # AF_NETLINK, SOCK_RAW, NETLINK_RDMA
        bind($s, pack("S S L L", 16, 0, 0, 0)) or die "bind: $!";
        my $seq = 0;
        sub ask {
            my ($cmd, $dev) = @_;
            $seq++;
            my $attr = defined $dev ? pack("S S L", 8, 1, $dev) : "";
            # NLM_F_REQUEST | NLM_F_DUMP; type RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd).
            my $msg = pack("L S S L L", 16 + length $attr, (5 << 10) | $cmd, 0x301, $seq, 0) . $attr;
            send($s, $msg, 0, pack("S S L L", 16, 0, 0, 0)) or die "send: $!";
            my @got;
            for (my $done = 0; !$done;) {
                defined recv($s, my $buf, 65536, 0) or die "recv: $!";
                push @got, $buf;
                for (my $at = 0; $at + 16 <= length $buf;) {
                    my ($len, $type, $flags, $sq) = unpack("L S S L", substr($buf, $at, 12));
                    $done = 1 if $sq == $seq && ($type == 2 || $type == 3);
                    last if $len < 16;
                    $at += ($len + 3) & ~3;
                }
            }
            print join(" ", $cmd, defined $dev ? $dev : "-", map { unpack("H*", $_) } @got), "\n";
            return @got;
        }
        my @devs;
        for my $buf (ask(1, undef)) {
            for (my $at = 0; $at + 16 <= length $buf;) {
                my ($len, $type) = unpack("L S", substr($buf, $at, 6));
                last if $len < 16;
                if ($type == ((5 << 10) | 1)) {
                    for (my $a = $at + 16; $a + 4 <= $at + $len;) {
                        my ($alen, $atype) = unpack("S S", substr($buf, $a, 4));
                        last if $alen < 4;
                        push @devs, unpack("L", substr($buf, $a + 4, 4)) if ($atype & 0x3fff) == 1;
                        $a += ($alen + 3) & ~3;
                    }
                }
                $at += ($len + 3) & ~3;
            }
        }
        for my $dev (@devs) { ask($_, $dev) for (22, 14, 11); }
    '
}
rt_stop() {
    while read -r _ pid; do wait "$pid"; echo "exit $?"; done <"$R/rt-pids"
    cat "$R/rt-server.log" "$R/rt-client.log"
    for n in 1 2; do rmdir "$(rt_container $n)"; done
    rmdir "$RT_POD"
}

# rdma.link: the unit's daemon (report mode, a long debounce so that a burst of
# flaps ends before the reconcile its first link event asks for), on the unit's
# default listener; http_get is steps.sh's (curl).
LINK_CONFIG='mode = "report"
[daemon]
interval_secs = 3600
debounce_ms = 3000
[containerd]
enabled = false
[systemd]
enabled = false
[kernel]
enabled = false
[rdma]
flap_threshold = 2
flap_window = "1h"'
# A sample's value in /metrics ($1: the series as printed, labels included).
metric() { http_get /metrics | awk -v m="$1" '$1 == m { print $2 }'; }
reconciles() { metric rdma_node_agent_reconciles_total; }
FLAPS='rdma_node_agent_port_flaps_total{device="rxe0",port="1"}'
# Restarts the installed unit. Its StartLimitBurst=5 in 300 s is for a
# crash-looping daemon; this tier's config changes restart it more often than
# that, so each clears the count first, as an operator would (reset-failed).
agent_restart() {
    systemctl reset-failed rdma-node-agent 2>/dev/null
    systemctl "${1:-restart}" rdma-node-agent && return 0
    systemctl status --no-pager rdma-node-agent
    journalctl -u rdma-node-agent -b --no-pager | tail -n 20
    return 1
}
# The daemon's PID, or failure (never 0: `kill 0` signals this script's group).
agent_pid() {
    p=$(systemctl show -P MainPID rdma-node-agent)
    [ -n "$p" ] && [ "$p" != 0 ] || { echo "rdma-node-agent is not running"; return 1; }
    echo "$p"
}
# Started (at boot 2 the unit already runs: started at boot), then answering.
link_daemon_start() {
    agent_restart start || return 1
    i=0
    until [ -n "$(reconciles)" ]; do
        i=$((i + 1))
        [ $i -lt 300 ] || { echo "the daemon did not answer in 60 s"; return 1; }
        sleep 0.2
    done
    # The reconcile for its new watches, if any, before anything is flapped.
    sleep 3
    http_get /metrics | grep -E '^rdma_node_agent_(port_flaps_total|reconciles_total|port_link_downed_total)'
}
link_daemon_stop() {
    systemctl stop rdma-node-agent
    unit_journal >>"$R/link-daemon.log"
}
wait_state() {
    i=0
    until grep -q "$1" /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "rxe0 port 1 not $1 after 20 s"; return 1; }
        sleep 0.2
    done
}
wait_reconciles_above() {
    i=0
    until [ "$(reconciles)" -gt "$1" ] 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 300 ] || { echo "no reconcile after $1 in 60 s"; return 1; }
        sleep 0.2
    done
}
# N flaps, each seen by a reconcile while the port is DOWN (the one the link
# event asks for), then up again.
flap_polled() {
    for _ in $(seq "$1"); do
        n=$(reconciles)
        ip link set veth0 down && wait_state DOWN || return 1
        wait_reconciles_above "$n" || return 1
        ip link set veth0 up && wait_state ACTIVE || return 1
    done
    metric "$FLAPS"
}
# N flaps in a burst, faster than the daemon's debounce: no reconcile sees the
# port DOWN, only the link events count them.
flap_burst() {
    n=$(reconciles)
    for _ in $(seq "$1"); do
        ip link set veth0 down && wait_state DOWN || return 1
        ip link set veth0 up && wait_state ACTIVE || return 1
    done
    echo "reconciles during the burst: $(($(reconciles) - n))"
    wait_reconciles_above "$n" || return 1
    sleep 1
    metric "$FLAPS"
    http_get /status | grep -o '"trigger": *"[^"]*"'
}

# The NRI step's node containerd: 2.1 from the payload, run by a unit of its
# own (the image's containerd.service is Debian's 1.6, which the base spec
# steps keep), NRI on at /run/nri/nri.sock, a soft memlock of 64 KiB: only the
# agent's plugin can raise a container's. The agent is told the unit (`[containerd]
# unit`) and finds containerd's config from its ExecStart's --config.
NRI_DIR=/var/lib/containerd-nri
NRI_CONF=/etc/containerd-nri/config.toml
NRI_UNIT='[Unit]
Description=containerd 2.1 with NRI (the VM tier node containerd for memlock_via = "nri")
After=local-fs.target network.target

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd-2.1 --config /etc/containerd-nri/config.toml
Type=notify
Delegate=yes
KillMode=process
Restart=always
LimitMEMLOCK=64K:infinity
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999'
nri_containerd_start() {
    install -m 755 /payload/containerd-2.1 /usr/local/bin/containerd-2.1 || return 1
    mkdir -p "$(dirname "$NRI_CONF")" "$NRI_DIR" || return 1
    /payload/vm-nri-guest containerd-config "$NRI_DIR" /run/nri/nri.sock >"$NRI_CONF" || return 1
    printf '%s\n' "$NRI_UNIT" >/etc/systemd/system/containerd-nri.service || return 1
    systemctl daemon-reload || return 1
    systemctl start containerd-nri || return 1
    systemctl is-active containerd-nri
    i=0
    until [ -S /run/nri/nri.sock ]; do
        i=$((i + 1))
        [ $i -lt 300 ] || { echo "no NRI socket 60 s after containerd-nri started"; return 1; }
        sleep 0.2
    done
    /usr/local/bin/containerd-2.1 --version
}
# The agent's unit config for the NRI step, in place of LINK_CONFIG until the
# step ends; the kernel concern off (`dkms status` takes 3 s under TCG).
NRI_AGENT_CONFIG='[containerd]
memlock_via = "nri"
unit = "containerd-nri.service"
binary = "/usr/local/bin/containerd-2.1"
nri_socket = "/run/nri/nri.sock"
[systemd]
enabled = false
[kernel]
enabled = false
[daemon]
interval_secs = 1'
nri_agent_config() {
    printf '%s\n' "$NRI_AGENT_CONFIG" >"$CONF" || return 1
    cat "$CONF"
}
# The step's end: both units stopped, the agent's config back to rdma.link's.
nri_end() {
    systemctl stop rdma-node-agent containerd-nri || return 1
    printf '%s\n' "$LINK_CONFIG" >"$CONF"
}

blocked() {
    step "apply-$1" "$AGENT" --config "$NCONF" apply --json --no-restart
    step "netns-$1" "$AGENT" --config "$NCONF" check --json --only rdma.netns
    step "kernel-$1" rdma system set netns exclusive
    step "mode-after-$1" live_mode
}

boot1() {
    step install install_agent "$LINK_CONFIG"
    step uname uname -r
    step rxe-up rxe_up
    sh_step rdma-link 'rdma link show; rdma dev show; ibv_devinfo -d rxe0'
    step capture-sysfs capture_sysfs "$R/fixture-rxe"
    # rdma.devices: live, and on the captured tree (which must say the same).
    step devices-live "$AGENT" check --json --only rdma.devices
    step devices-fixture "$AGENT" --root "$R/fixture-rxe" check --json --only rdma.devices

    # rdma.netns, unmanaged: the mode the agent reads against the kernel's answer.
    step netns-initial "$AGENT" check --json --only rdma.netns
    step mode-initial live_mode

    # The memlock failure the product exists to prevent, outside any container.
    step bw-root write_bw 'ulimit -l 64;'
    step bw-nolock-64k write_bw "ulimit -l 64; $NOLOCK"
    step bw-nolock-8m write_bw "ulimit -l 8192; $NOLOCK"
    step bw-nolock-unlimited write_bw "ulimit -l unlimited; $NOLOCK"

    step restrack-start rt_start
    step restrack-iproute2 rdma resource show pd
    step restrack-record record_restrack
    step restrack-check "$AGENT" check --json --only pods.rdma
    step restrack-stop rt_stop

    # memlock_via = "nri": the node's containerd is 2.1 with NRI on (a unit of
    # its own), the agent's unit has the NRI plugin alone (no base spec), and
    # ib_write_bw runs in a pod; then the same pod with the agent's unit
    # stopped. The driver's records are nri-*; its own log is nri-driver's. A
    # hostNetwork sandbox gets copies of the node's /etc/hosts and resolv.conf,
    # which a node has and this minimal image lacks.
    [ -e /etc/hosts ] || printf '127.0.0.1\tlocalhost\n' >/etc/hosts
    [ -e /etc/resolv.conf ] || : >/etc/resolv.conf
    step nri-containerd-start nri_containerd_start
    sh_step nri-containerd-limits 'cat "/proc/$(systemctl show -P MainPID containerd-nri)/limits"'
    step nri-agent-config nri_agent_config
    step nri-driver env RDMA_AGENT_BUSYBOX=/payload/busybox RDMA_AGENT_TIMEOUT_SCALE=10 \
        /payload/vm-nri-guest run "$NRI_DIR/containerd.sock" "$R"
    step nri-agent-journal unit_journal
    step nri-end nri_end

    # apply, exclusive, with no other network namespace: the live switch.
    config exclusive
    step apply-exclusive "$AGENT" --config "$NCONF" apply --json --no-restart
    step mode-after-apply-exclusive live_mode
    sh_step modprobe-after-apply-exclusive "cat /etc/modprobe.d/rdma-node-agent.conf"
    # containerd.service runs (systemd started it at boot): the apply wrote its
    # base spec and left the restart to the operator (--no-restart), who does
    # it, so that the later applies have no restart pending.
    step containerd-restart systemctl restart containerd

    # The base spec the agent wrote, through runc: at its limit, and a control.
    sh_step base-spec 'cat /etc/containerd/rdma-node-agent/base-spec.json'
    step runc-bundle-agent bundle /etc/containerd/rdma-node-agent/base-spec.json /run/bundle-agent
    step runc-agent-spec timeout 180 runc run --bundle /run/bundle-agent bw-agent
    step runc-bundle-64k bundle /etc/containerd/rdma-node-agent/base-spec.json /run/bundle-64k 65536
    step runc-64k timeout 180 runc run --bundle /run/bundle-64k bw-64k

    # And back to shared, live.
    config shared
    step apply-shared "$AGENT" --config "$NCONF" apply --json --no-restart
    step mode-after-apply-shared live_mode

    # The kernel refuses while another namespace exists; one kind at a time:
    # the agent's apply, its check, then the kernel asked directly (iproute2).
    config exclusive
    ip netns add blocker
    blocked ipnetns
    ip netns delete blocker
    step settle-ipnetns settle_netns

    unshare --net sleep 600 &
    holder=$!
    sleep 1
    echo "$holder" >"$R/unshare-pid"
    blocked unshare
    kill "$holder"
    wait "$holder" 2>/dev/null
    step settle-unshare settle_netns

    touch /run/bound-ns
    unshare --net=/run/bound-ns true
    blocked bindmount
    umount /run/bound-ns
    step settle-bindmount settle_netns

    # Held by an open file only (its /run/netns entry deleted): nothing names it
    # but the kernel, so the agent asks, and the kernel's EBUSY comes back.
    ip netns add fdheld
    sleep 600 3</run/netns/fdheld &
    holder=$!
    ip netns delete fdheld
    step apply-fd "$AGENT" --config "$NCONF" apply --json --no-restart
    step kernel-fd rdma system set netns exclusive
    step mode-after-fd live_mode
    kill "$holder"
    wait "$holder" 2>/dev/null
    step settle-fd settle_netns
    link_flaps
    # driver.health: netdevsim's health reporter, healthy then broken, read
    # from the daemon under its installed unit (tests/vm/driver-steps.sh).
    step driver-daemon-start link_daemon_start
    driver_health_steps
    step driver-daemon-stop link_daemon_stop
    step driver-unwatch driver_unwatch
    counters_netem
    # Live shared, exclusive persisted: the next boot comes up exclusive from
    # modprobe.d alone.
    sh_step modprobe-persisted "cat /etc/modprobe.d/rdma-node-agent.conf"
    step mode-before-reboot live_mode
    touch "$R/reboot"
}

# The unit restarted; what the new daemon exports then.
link_restart() {
    agent_restart || return 1
    link_daemon_start >/dev/null || return 1
    http_get /metrics | grep -E '^rdma_node_agent_(port_|check_reason)'
}
# rdma.link on boot 1: 3 flaps seen by reconciles, 2 more between them, a
# restarted daemon adds none; the history stays for boot 2.
link_flaps() {
    step link-daemon link_daemon_start
    step link-polled flap_polled 3
    step link-burst flap_burst 2
    step link-check "$AGENT" check --json --only rdma.link
    step link-restart link_restart
    link_daemon_stop
}

boot2() {
    step boot2-uname uname -r
    sh_step boot2-unit 'systemctl is-enabled rdma-node-agent; systemctl is-active rdma-node-agent'
    step boot2-mode live_mode
    step boot2-netns "$AGENT" --config "$NCONF" check --json --only rdma.netns
    step boot2-revert "$AGENT" --config "$NCONF" revert --json
    sh_step boot2-modprobe-after-revert 'ls -l /etc/modprobe.d/'
    step boot2-mode-after-revert live_mode
    # revert leaves the live mode alone; apply with "shared" switches it back.
    config shared
    step boot2-apply-shared "$AGENT" --config "$NCONF" apply --json --no-restart
    step boot2-mode-after-apply-shared live_mode
    # rdma.link after the reboot: the unit started at boot, rxe0 there before
    # it; the history kept, no flap for the reboot.
    step boot2-link-daemon link_daemon_start
    step boot2-link-check "$AGENT" check --json --only rdma.link
    link_daemon_stop
    kernel_gate
}

# check --json of the three kernel checks, with KCONF.
kernel_check() {
    step "$1" "$AGENT" --config "$KCONF" check --json --only kernel.change --only kernel.dkms --only kernel.modules
}
# The tiny module loaded from the running kernel's tree, as modprobe finds it.
probe_module() {
    modprobe rdma_probe || return 1
    grep '^rdma_probe ' /proc/modules
    modinfo -F filename rdma_probe
    modinfo -F vermagic rdma_probe
}

# Bookworm's kernel (A, running) and the newer one installed next to it (B),
# whose rdma-probe build the image left uninstalled (tests/vm/customize.sh).
kernel_gate() {
    mkdir -p "$(dirname "$KCONF")"
    printf '[kernel]\nrequired_modules = ["rdma_probe"]\n' >"$KCONF"
    kb=$(ls /boot | sed -n 's/^vmlinuz-//p' | sort -V | tail -n 1)
    echo "$kb" >"$R/kernel-b"
    step gate-probe probe_module
    # The agent records the kernel it converged on: kernel.change's reference.
    step gate-apply "$AGENT" --config "$KCONF" apply --json --no-restart
    step gate-dkms-status dkms status
    kernel_check gate-built
    step gate-install dkms install -m rdma-probe -v 1.0 -k "$kb"
    step gate-dkms-status-installed dkms status
    kernel_check gate-installed
    # With direct kernel boot (-kernel/-initrd) QEMU is the boot loader: the
    # guest names the kernel of its next boot here, as `grub-reboot` would, and
    # run.sh boots that kernel's vmlinuz and initrd on the same disk.
    echo "$kb" >"$R/reboot"
}

boot3() {
    step boot3-uname uname -r
    step boot3-probe probe_module
    step boot3-dkms-status dkms status
    # Before any apply on this kernel: the change is seen, not yet recorded.
    kernel_check boot3-kernel
    step boot3-apply "$AGENT" --config "$KCONF" apply --json --no-restart
    step boot3-change-after-apply "$AGENT" --config "$KCONF" check --json --only kernel.change
}

echo "guest: boot $boot ($PHASE), kernel $(uname -r), early steps at $(cat "$R/boot$boot-init-uptime") s"
case $PHASE:$boot in
# Soft-RoCE as a node has it at boot, before the agent's unit starts.
early:2) step boot2-rxe-up rxe_up ;;
early:*) ;;
main:1) boot1 ;;
main:2) boot2 ;;
main:3) boot3 ;;
esac
[ "$PHASE" = early ] || finish
