# rdma.counters in the real-kernel tier (sourced by tests/vm/guest.sh, boot 1,
# after rdma.link's steps; the live netns mode is shared there).
#
# RoCE must cross a real netdev for netem to act on it, and the 6.1 kernel's
# rxe receives RoCE only in the initial network namespace (its UDP socket is
# init_net's; it finds the rxe device by the receiving netdev). So both ends
# stay here and the packets take a detour: rxe0 on veth0 (10.77.0.1) and rxe1
# on vethc (10.77.0.2); policy routing by output device sends rxe0's packets
# out of veth0 into the namespace `peer`, which forwards them back in over
# vethb/vethc (and the answers the other way). ib_write_bw rxe0 -> rxe1, first
# clean, then with `tc netem` loss and corruption on veth0; rxe's counters and
# the verdict of the unit's daemon (its /status, after a SIGHUP reconcile) are
# recorded after each. At the end everything is taken down again.
# rdma.link's daemon config (guest.sh's LINK_CONFIG) and a [counters] section:
# retransmits warn at 20 within the hour (the default, 3601, is an hour of one
# a second; this run lasts seconds).
COUNTERS_SECTION='[counters]
window = "1h"
retransmits_warn = 20'
# rxe's hw_counters of both ports, one `device name value` a line.
rxe_counters() {
    for d in rxe0 rxe1; do
        for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do
            echo "$d $(basename "$f") $(cat "$f")"
        done
    done
}
# The index of the port's RoCE v2 GID of IPv4 address $2 (hex, 8 digits).
gid_index() {
    for g in /sys/class/infiniband/$1/ports/1/gids/*; do
        i=$(basename "$g")
        case "$(cat "$g" 2>/dev/null)" in
        *"0000:0000:0000:0000:0000:ffff:$2") ;;
        *) continue ;;
        esac
        [ "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] && { echo "$i"; return 0; }
    done
    return 1
}
counters_up() {
    ip link add vethb type veth peer name vethc || return 1
    ip netns add peer || return 1
    ip link set veth1 netns peer && ip link set vethb netns peer || return 1
    ip netns exec peer sh -ec '
        sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
        for d in lo veth1 vethb; do ip link set $d up; done
        for d in veth1 vethb; do sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.proxy_arp=1; done
        ip addr add 10.88.0.254/24 dev veth1
        ip addr add 10.89.0.254/24 dev vethb
        ip route add 10.77.0.1/32 dev veth1
        ip route add 10.77.0.2/32 dev vethb' || return 1
    ip link set vethc up || return 1
    sysctl -qw net.ipv4.conf.all.rp_filter=0 || return 1
    for d in veth0 vethc; do
        sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1 || return 1
    done
    ip addr add 10.77.0.1/32 dev veth0 && ip addr add 10.77.0.2/32 dev vethc || return 1
    # Sent by rxe (its route lookup names the output device): out of that
    # device, not to the local table, which comes after.
    ip route add 10.77.0.2/32 dev veth0 table 100 && ip route add 10.77.0.1/32 dev vethc table 101 || return 1
    ip rule add pref 10 oif veth0 lookup 100 && ip rule add pref 11 oif vethc lookup 101 || return 1
    ip rule add pref 1000 lookup local && ip rule del pref 0 || return 1
    rdma link add rxe1 type rxe netdev vethc || return 1
    i=0
    until gid_index rxe0 0a4d:0001 >/dev/null && gid_index rxe1 0a4d:0002 >/dev/null \
        && grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "no RoCE v2 IPv4 GID or no ACTIVE rxe0 after 20 s"; return 1; }
        sleep 0.2
    done
    rdma link show
    ip rule show
    echo "gid rxe0 $(gid_index rxe0 0a4d:0001) rxe1 $(gid_index rxe1 0a4d:0002)"
}
# ib_write_bw rxe0 -> rxe1 by the detour: 20 writes of 1 MiB. The QP
# timeout is about 1 s (-u 18, 4.096 us x 2^18): TCG's pauses are no ACK
# timeouts, so what is retransmitted is what netem lost or corrupted.
peer_bw() {
    x0=$(gid_index rxe0 0a4d:0001) && x1=$(gid_index rxe1 0a4d:0002) || return 1
    timeout 120 ib_write_bw -d rxe1 -x "$x1" -s 1048576 -n 20 -u 18 -F >"$R/peer-bw-server.tmp" 2>&1 &
    server=$!
    sleep 2
    timeout 120 ib_write_bw -d rxe0 -x "$x0" -s 1048576 -n 20 -u 18 -F 10.77.0.2 2>&1
    rc=$?
    wait $server
    src=$?
    echo "--- server (exit $src) ---"
    cat "$R/peer-bw-server.tmp"
    [ $rc = 0 ] && [ $src = 0 ]
}
counters_daemon_start() {
    printf '%s\n%s\n' "$LINK_CONFIG" "$COUNTERS_SECTION" >"$CONF"
    agent_restart || return 1
    link_daemon_start >/dev/null || return 1
    counters_reconcile
}
# A SIGHUP reconcile, then rdma.counters as the daemon's /status has it.
counters_reconcile() {
    n=$(reconciles)
    pid=$(agent_pid) || return 1
    kill -HUP "$pid" || return 1
    wait_reconciles_above "$n" || return 1
    http_get /status
}
netem_on() {
    modprobe sch_netem 2>/dev/null
    tc qdisc add dev veth0 root netem loss 3% corrupt 2% || return 1
    tc qdisc show dev veth0
}
# The daemon stopped first: the teardown takes veth0 down and up, which is
# no flap of rdma.link's history (boot 2 asserts on it).
counters_down() {
    systemctl stop rdma-node-agent
    unit_journal >>"$R/counters-daemon.log"
    printf '%s\n' "$LINK_CONFIG" >"$CONF"
    tc qdisc del dev veth0 root 2>/dev/null
    rdma link delete rxe1
    ip rule add pref 0 lookup local
    ip rule del pref 1000
    ip rule del pref 10
    ip rule del pref 11
    ip route flush table 100
    ip route flush table 101
    ip link del vethc
    ip netns exec peer ip link set veth1 netns 1
    ip netns del peer
    ip addr del 10.77.0.1/32 dev veth0
    ip link set veth1 up
    wait_state ACTIVE
    rdma link show
    ip rule show
}
counters_netem() {
    step counters-up counters_up
    # The daemon's baseline of both ports (its first reading), then a reconcile.
    step counters-daemon counters_daemon_start
    step counters-clean-bw peer_bw
    step counters-clean-hw rxe_counters
    step counters-clean counters_reconcile
    step counters-netem-on netem_on
    step counters-netem-bw peer_bw
    step counters-netem-hw rxe_counters
    step counters-netem counters_reconcile
    step counters-netem-metrics sh -c "curl -s --max-time 10 http://127.0.0.1:9470/metrics | grep -E '^rdma_node_agent_port_errors'"
    step counters-down counters_down
}
