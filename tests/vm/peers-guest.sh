#!/bin/sh
# The peer-probe tier's guest (tests/vm_peers.rs), run by tests/vm/vm-guest like
# guest.sh. The payload: this script as guest.sh, steps.sh and the agent's .deb.
# The package is installed (dpkg checks the helper's library Depends), and its
# probe helper, /usr/libexec/rdma-node-agent/rdma-node-agent-probe, is driven
# against a real Soft-RoCE device; what it printed, per fault, is recorded as
# NAME.out/.err/.rc under /results; the host asserts on them.
#
# One device, loopback (responder and prober on rxe0's address): the kernels of
# this image (6.1, 6.12) open rxe's UDP socket in the initial network namespace
# only, so an rxe device on a veth moved into another namespace sends and
# receives nothing (step netns-rxe records what the kernel does).
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/steps.sh"
[ "$PHASE" = early ] && exit 0
P=/usr/libexec/rdma-node-agent/rdma-node-agent-probe
K=/etc/rdma-node-agent/peers.key
BAD=/etc/rdma-node-agent/forged.key
A=10.77.0.1
ping_to() { # KEYFILE DST
    "$P" ping --src "$A" --dst "$2" --port 18770 --key-file "$1" --node node1 --rail 0 --timeout-ms 8000
}
responder() {
    "$P" respond --addr "$A" --port 18770 --key-file "$K" --node node0 --rail 0 >>"$R/respond.jsonl" 2>&1 &
    echo $! >/run/responder.pid
    i=0
    until [ "$(grep -c '"ready"' "$R/respond.jsonl" 2>/dev/null)" -ge "$1" ]; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "the responder did not get ready"; return 1; }
        sleep 0.2
    done
}
sh_step kernel 'uname -r'
sh_step rxe-up '
    modprobe rdma_rxe &&
    ip link add veth0 type veth peer name veth1 && ip link set veth0 up && ip link set veth1 up &&
    ip addr add 10.77.0.1/24 dev veth0 && rdma link add rxe0 type rxe netdev veth0 &&
    i=0; until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.2; done;
    rdma link show'
mkdir -p /etc/rdma-node-agent
head -c 32 /dev/urandom | base64 >"$K"
head -c 32 /dev/urandom | base64 >"$BAD"
chmod 600 "$K" "$BAD"
step install install_agent '# the peer tier: the daemon is not started'
step ldd ldd "$P"
# The selftest with the real perftest on rxe0 (the gate's proof of a port):
# by hand, and as the daemon runs it for the gate, a transient unit with the
# same sandbox (src/host/dbus.rs: CAP_SYS_RESOURCE alone, ProtectSystem=strict,
# the state directory writable).
step selftest-hand timeout 300 rdma-node-agent selftest --device rxe0 --json
step selftest-unit timeout 300 systemd-run --wait --collect --quiet -p CapabilityBoundingSet=CAP_SYS_RESOURCE \
    -p ProtectSystem=strict -p ReadWritePaths=/var/lib/rdma-node-agent -p StandardOutput=file:/run/selftest-unit.json \
    rdma-node-agent selftest --device rxe0 --json
sh_step selftest-unit-json 'cat /run/selftest-unit.json'
step responder-start responder 1
step ping-ok ping_to "$K" "$A"
step ping-ok-2 ping_to "$K" "$A"
step ping-forged ping_to "$BAD" "$A"
# A probe's cost (scripts/bench-probes.sh reads it): 20 probes in a row, the
# wall, user and system seconds of them all (bash's time, children included).
step bench-probes bash -c "TIMEFORMAT='%R %U %S'; time (for i in \$(seq 20); do $P ping --src $A --dst $A --port 18770 --key-file $K --node node1 --rail 0 --timeout-ms 8000 >/dev/null; done)"
# The helper under the shipped unit's sandbox: the installed unit with its
# ExecStart replaced (a oneshot ping, then a responder), as the daemon's child
# would run (same devices, address families, system calls, capabilities).
sandboxed() { # NAME TYPE COMMAND
    sed -e "s|^ExecStart=.*|ExecStart=$3|" -e "s|^Type=.*|Type=$2\nStandardOutput=file:/run/$1.out|" \
        -e '/^WatchdogSec=/d' -e '/^NotifyAccess=/d' -e '/^ExecReload=/d' -e '/^Restart=/d' \
        /lib/systemd/system/rdma-node-agent.service >"/etc/systemd/system/$1.service"
    systemctl daemon-reload
}
sandbox_ping() {
    sandboxed rna-ping oneshot "$P ping --src $A --dst $A --port 18770 --key-file $K --node node1 --rail 0 --timeout-ms 8000" &&
        systemctl start rna-ping
    cat /run/rna-ping.out
}
sandbox_respond() {
    kill "$(cat /run/responder.pid)"
    sleep 1
    sandboxed rna-respond simple "$P respond --addr $A --port 18770 --key-file $K --node node2 --rail 1" &&
        systemctl start rna-respond && sleep 3 && ping_to "$K" "$A"
    systemctl stop rna-respond
    cat /run/rna-respond.out >&2
}
step sandbox-ping sandbox_ping
step sandbox-respond sandbox_respond
step responder-again responder 2
cp "$K" /etc/rdma-node-agent/open.key && chmod 644 /etc/rdma-node-agent/open.key
step ping-key-world-readable ping_to /etc/rdma-node-agent/open.key "$A"
step ping-no-peer-address ping_to "$K" 10.77.0.9
sh_step responder-stop 'kill $(cat /run/responder.pid); sleep 1'
step ping-responder-stopped ping_to "$K" "$A"
step responder-restart responder 3
sh_step addr-del "ip addr del $A/24 dev veth0; sleep 2"
step ping-address-removed ping_to "$K" "$A"
sh_step responder-after-addr-del "sleep 1; cat $R/respond.jsonl"
# Feasibility of one namespace per node: rxe on a veth inside another namespace.
sh_step netns-rxe '
    kill $(cat /run/responder.pid); sleep 1;
    ip netns add n1 && ip link set veth1 netns n1 &&
    ip netns exec n1 ip addr add 10.77.0.2/24 dev veth1 && ip netns exec n1 ip link set veth1 up &&
    ip addr add 10.77.0.1/24 dev veth0 && ip netns exec n1 rdma link add rxe1 type rxe netdev veth1 && rdma link show'
step netns-responder responder 4
step ping-from-netns ip netns exec n1 "$P" ping --src 10.77.0.2 --dst "$A" --port 18770 --key-file "$K" --node node1 --rail 0 --timeout-ms 8000
kill "$(cat /run/responder.pid)" 2>/dev/null
cp "$R/respond.jsonl" "$R/respond.out"
