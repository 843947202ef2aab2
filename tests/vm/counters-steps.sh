# rdma.counters in the real-kernel tier (sourced by tests/vm/guest.sh, boot 1,
# after rdma.link's steps; the live netns mode is shared there).
#
# Soft-RoCE between two network namespaces, so that RoCE packets cross a real
# netdev: rxe0 on veth0 here, rxe1 on veth1 moved into the namespace `peer`.
# ib_write_bw from rxe0 to rxe1, first clean, then with `tc netem` loss and
# corruption on veth0; rxe's retransmission counters and the verdict of the
# unit's daemon (its /status, after a SIGHUP reconcile) are recorded after each.
# At the end: netem, rxe1, the namespace and the addresses gone, veth1 back,
# the unit stopped with rdma.link's config back.
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
    ip netns add peer || return 1
    ip link set veth1 netns peer || return 1
    ip netns exec peer ip link set lo up || return 1
    ip netns exec peer ip link set veth1 up || return 1
    ip addr add 10.77.0.1/24 dev veth0 || return 1
    ip netns exec peer ip addr add 10.77.0.2/24 dev veth1 || return 1
    ip netns exec peer rdma link add rxe1 type rxe netdev veth1 || return 1
    i=0
    until gid_index rxe0 0a4d:0001 >/dev/null && gid_index rxe1 0a4d:0002 >/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "no RoCE v2 IPv4 GID after 20 s"; return 1; }
        sleep 0.2
    done
    rdma link show
    echo "gid rxe0 $(gid_index rxe0 0a4d:0001) rxe1 $(gid_index rxe1 0a4d:0002)"
}
# ib_write_bw rxe0 -> rxe1 across the veth pair: 20 writes of 1 MiB. The QP
# timeout is about 1 s (-u 18, 4.096 us x 2^18): TCG's pauses are no ACK
# timeouts, so what is retransmitted is what netem lost or corrupted.
peer_bw() {
    x0=$(gid_index rxe0 0a4d:0001) && x1=$(gid_index rxe1 0a4d:0002) || return 1
    ip netns exec peer timeout 120 ib_write_bw -d rxe1 -x "$x1" -s 1048576 -n 20 -u 18 -F >"$R/peer-bw-server.tmp" 2>&1 &
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
    systemctl restart rdma-node-agent || return 1
    link_daemon_start >/dev/null || return 1
    counters_reconcile
}
# A SIGHUP reconcile, then rdma.counters as the daemon's /status has it.
counters_reconcile() {
    n=$(reconciles)
    kill -HUP "$(systemctl show -P MainPID rdma-node-agent)" || return 1
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
    ip netns exec peer rdma link delete rxe1
    ip netns exec peer ip link set veth1 netns 1
    ip netns del peer
    ip addr del 10.77.0.1/24 dev veth0
    ip link set veth1 up
    wait_state ACTIVE
    rdma link show
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
