//! The reason codes of `rdma.peers`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused. A code names a port's own fault (`fail`) or a peer's
//! (`warn`, naming the peer): a healthy node is never the one blamed.

crate::reasons! {
    PEER_UNREACHABLE = "peer_unreachable" {
        checks: "`rdma.peers`",
        means: "probes did not connect or complete: to (almost) every peer from this port (`fail`: the port, its link or its switch port), or to a few peers while the others answered (`warn`, naming them: their fault, not this node's)",
        remedy: "`fail`: the port's link, cable and switch port (`ibv_devinfo`, `rdma link`), its address and route; `warn`: look at the named peer (its own `rdma.peers` names its fault); `rdma-node-agent fleet` names the culprit; see [peers](peers.md)",
    },
    ONE_WAY = "one_way" {
        checks: "`rdma.peers`",
        means: "peers reach this port (its responder answered their probes in the last two rounds) but its own probes reach none: the path works one way only",
        remedy: "this port's outbound path: source address and route (`ip route get <peer> from <addr>`), ARP/neighbour entries, an ACL or a one-sided VLAN/PFC setting on the switch port",
    },
    MTU_MISMATCH = "mtu_mismatch" {
        checks: "`rdma.peers`",
        means: "the small message went both ways but the one of the connection's path-MTU size did not, in two rounds in a row (one round of it after a healthy one is `loss`): something on the path carries less than the ports negotiated (a switch port's MTU below the NICs')",
        remedy: "make the MTU the same end to end: the netdevs' MTU and the switch ports' (RoCE: a 4096 RDMA MTU needs an Ethernet MTU of at least 4200 everywhere); `fail`: from every peer (this port's link); `warn`: only to the named peers",
    },
    GID_MISSING = "gid_missing" {
        checks: "`rdma.peers`",
        means: "the port has no address to probe from: its netdev lost its IPv4 address, so the RoCE v2 IPv4 GID is gone (or the IPoIB address, on InfiniBand)",
        remedy: "restore the netdev's address (`ip addr`, the node's network config: netplan, NetworkManager, the SR-IOV/host-device CNI); `rdma link` and `show_gids` list the GIDs",
    },
    RAIL_MISMATCH = "rail_mismatch" {
        checks: "`rdma.peers`",
        means: "a peer answered from another rail than expected: every answer (`fail`: this port is cabled into another rail's leaf, or `[peers.rails]` names it wrongly) or the named peers' (`warn`: theirs)",
        remedy: "trace the cable to its leaf switch; fix `[peers.rails]` or the peer source where the rail is written wrongly",
    },
    CLOCK_SKEW = "clock_skew" {
        checks: "`rdma.peers`",
        means: "probes carrying the fleet key were refused as outside the responder's ±60 s time window (`stale`): every peer refused this node's (`fail`: its clock is off), or this node's responder refused a sender's (`warn`, naming it: that node's clock, or an old probe replayed)",
        remedy: "the clocks: `timedatectl`, `chronyc tracking` (or ntpd) on the named node and this one; a node whose time sync failed after a reboot (RTC, an unreachable NTP server) is the usual cause",
    },
    WRONG_PEER = "wrong_peer" {
        checks: "`rdma.peers`",
        means: "another node than the peer source names answered at a peer's address (its name proven by the fleet key): the path to that peer is not proven; the list is stale (a node replaced, an address reused) or two nodes hold one address (`warn`: never this port's fault)",
        remedy: "compare the peer source with the named nodes' addresses (`ip -br addr` on both; `rdma-node-agent fleet` shows whom each address reached); fix the list (the Ansible role templates it from the inventory) or the duplicated address",
    },
    LOSS = "loss" {
        checks: "`rdma.peers`",
        means: "probes to the same peers succeeded in one of the last two rounds and failed in the other (full-size messages timing out once included): an intermittent, lossy path (drops, PFC or ECN misconfigured, a marginal cable) or an overloaded peer",
        remedy: "the port's error counters (`rdma.counters`: retransmits, symbol errors), PFC/ECN settings on both ends, the cable",
    },
    KEY_REJECTED = "key_rejected" {
        checks: "`rdma.peers`",
        means: "probes were refused over the fleet key: every peer refused this node's (`fail`: its key file differs from the fleet's), or this node's responder refused a sender's (`warn`, naming it: a node with another key, or a forged probe)",
        remedy: "deploy the same `[peers] key_file` to every node (the Ansible role does); a refused sender that is no node of the fleet is someone probing the port: see SECURITY.md",
    },
    NOT_REACHED = "not_reached" {
        checks: "`rdma.peers`",
        means: "this port's own probes reach its peers, but no peer's probe reached its responder (answered or refused) for three intervals while it listened: the way in is broken (a hung responder, requests the kernel no longer matches to it, a route back from the port's address gone, an ACL toward the port); peers name it too",
        remedy: "`systemctl restart rdma-node-agent` restarts its responders; check the port's routes (`ip route get <peer> from <addr>`: a route through the port's netdev) and the switch port's ACL/VLAN toward it; `rdma-node-agent fleet` shows which peers fail to reach it",
    },
    RESPONDER_DOWN = "responder_down" {
        checks: "`rdma.peers`",
        means: "this port's probe responder is not running, so no peer can prove the port (the message says why: the helper missing, the port's address gone, the service port taken)",
        remedy: "the daemon's log (`journalctl -u rdma-node-agent`), the probe helper's installation, `[peers] port` free on the node",
    },
    PEERS_UNPROVEN = "peers_unproven" {
        checks: "`rdma.peers`",
        means: "no probe round proves the port: none yet, the newest is older than three intervals, it is from before this boot, the peer source failed (the round ran on its last list), the probe helper could not run or is stuck in the kernel (killed and not exited), or no peer shares the port's fabric (`unknown`, never `ok`)",
        remedy: "wait a round after start; otherwise the daemon's log (the prober, the helper), `dmesg` for a soft lockup or hung task when a helper is stuck, and the peer source (`[peers.source]`): does it list peers on this port's fabric?",
    },
}

// The return-to-service gate's own check (`rdma.gate`).
crate::reasons! { list GATE;
    GATE_CLOSED = "gate_closed" {
        checks: "`rdma.gate`",
        means: "the return-to-service gate is closed: since a boot, a kernel or RDMA driver change, or `rdma-node-agent gate reset`, the loopback selftest or a round of peer probes (`rdma.peers` ok on every ACTIVE port) has not passed yet; the node is not ready for RDMA jobs",
        remedy: "the message names what is still missing: the daemon runs the loopback selftest once per closing event (`journalctl -u rdma-node-agent-selftest` shows it; perftest must be installed), then a round of peer probes must pass (`rdma-node-agent check --only rdma.peers` says what fails); after a repair `rdma-node-agent gate reset`; see [peers](peers.md#the-return-to-service-gate)",
    },
}
