//! The reason codes of `rdma.counters`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    SYMBOL_ERRORS = "symbol_errors" {
        checks: "`rdma.counters`",
        means: "a port's `counters/symbol_error` rose by `[counters] symbol_errors_warn` (warn) or `symbol_errors_fail` (fail) or more within `[counters] window`: bit errors on the link",
        remedy: "reseat or replace the cable or optic, check the switch port (`mlxlink -d <dev> -m -c`); see [rdma.counters](checks/rdma.counters.md)",
    },
    LINK_INTEGRITY = "link_integrity" {
        checks: "`rdma.counters`",
        means: "`link_error_recovery`, `local_link_integrity_errors` or `excessive_buffer_overrun_errors` rose to the class's threshold: the link retrains or breaks its lossless contract",
        remedy: "as `symbol_errors`; buffer overruns: flow-control (PFC) settings on both ends",
    },
    RCV_ERRORS = "rcv_errors" {
        checks: "`rdma.counters`",
        means: "`port_rcv_errors` (and the remote-physical, switch-relay and constraint receive errors) rose to the class's threshold",
        remedy: "cable, optic, the peer's transmitter",
    },
    XMIT_DISCARDS = "xmit_discards" {
        checks: "`rdma.counters`",
        means: "`port_xmit_discards` or `port_xmit_constraint_errors` rose to the class's threshold: the port dropped what it should have sent",
        remedy: "congestion or a peer that does not take traffic (its port down, credits)",
    },
    RETRANSMITS = "retransmits" {
        checks: "`rdma.counters`",
        means: "transport retransmission counters (mlx5: `out_of_sequence`, `packet_seq_err`, `implied_nak_seq_err`, `local_ack_timeout_err`, `rnr_nak_retry_err`, …; rxe: `rcvd_seq_err`, `completer_retry_err`, `retry_exceeded_err`, …) rose to the class's threshold: packets lost on the path",
        remedy: "a lossy path (drops, PFC/ECN misconfigured), a peer gone (ACK timeouts), receivers not posting buffers (RNR)",
    },
    CONGESTION = "congestion" {
        checks: "`rdma.counters`",
        means: "congestion signals (`np_cnp_sent`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`, `rp_cnp_ignored`, `port_xmit_wait`) rose to the class's threshold",
        remedy: "the fabric's congestion control and traffic pattern; raise `[counters] congestion_warn` where this is normal load",
    },
    COUNTERS_SATURATED = "counters_saturated" {
        checks: "`rdma.counters`",
        means: "a port's IB PMA error counter sits at its maximum (16-, 8- or 4-bit: these saturate rather than wrap), so a rise can no longer be seen (`warn`)",
        remedy: "clear the port's counters (`perfquery -R`), then read what rises",
    },
    COUNTERS_UNREADABLE = "counters_unreadable" {
        checks: "`rdma.counters`",
        means: "a port's counter (or a device's `ports/`) could not be read; the other ports are still judged and named",
        remedy: "read the named file by hand; a device in error (`dmesg`, devlink health)",
    },
}
