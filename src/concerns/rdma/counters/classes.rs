//! Which kernel counter says what: each name as the kernel spells it in a
//! port's `counters/` (the IB PMA set every driver serves) or `hw_counters/`
//! (driver-specific: mlx5's Q counters and congestion counters, rxe's protocol
//! counters), mapped to the class the check rates. A name not listed here is
//! kept and shown (`other`), never dropped; it is not rated.

use crate::concerns::rdma::counters::reasons;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Physical-layer bit errors (PMA SymbolErrorCounter).
    SymbolErrors,
    /// Link retraining and integrity: recovery, local link integrity, buffer overrun.
    LinkIntegrity,
    /// Packets received with errors.
    RcvErrors,
    /// Packets the port could not send.
    XmitDiscards,
    /// Transport retransmissions: sequence errors, NAKs, ACK timeouts, retries exhausted.
    Retransmits,
    /// Congestion signals: CNPs, ECN marks, transmit waits.
    Congestion,
}

impl Class {
    pub const ALL: [Class; 6] = [
        Class::SymbolErrors,
        Class::LinkIntegrity,
        Class::RcvErrors,
        Class::XmitDiscards,
        Class::Retransmits,
        Class::Congestion,
    ];

    /// The label value, config key prefix and reason code.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::SymbolErrors => "symbol_errors",
            Class::LinkIntegrity => "link_integrity",
            Class::RcvErrors => "rcv_errors",
            Class::XmitDiscards => "xmit_discards",
            Class::Retransmits => "retransmits",
            Class::Congestion => "congestion",
        }
    }

    pub fn reason(self) -> crate::reason::Reason {
        match self {
            Class::SymbolErrors => reasons::SYMBOL_ERRORS,
            Class::LinkIntegrity => reasons::LINK_INTEGRITY,
            Class::RcvErrors => reasons::RCV_ERRORS,
            Class::XmitDiscards => reasons::XMIT_DISCARDS,
            Class::Retransmits => reasons::RETRANSMITS,
            Class::Congestion => reasons::CONGESTION,
        }
    }
}

/// Where a counter file lives under `ports/<n>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    Counters,
    HwCounters,
}

impl Dir {
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Counters => "counters",
            Dir::HwCounters => "hw_counters",
        }
    }
}

/// `(directory, name)` → class. `link_downed` is `rdma.link`'s (flaps), not
/// rated here twice.
pub fn class_of(dir: Dir, name: &str) -> Option<Class> {
    use Class::*;
    Some(match (dir, name) {
        (Dir::Counters, "symbol_error") => SymbolErrors,
        (
            Dir::Counters,
            "link_error_recovery"
            | "local_link_integrity_errors"
            | "excessive_buffer_overrun_errors",
        ) => LinkIntegrity,
        (
            Dir::Counters,
            "port_rcv_errors"
            | "port_rcv_remote_physical_errors"
            | "port_rcv_switch_relay_errors"
            | "port_rcv_constraint_errors",
        ) => RcvErrors,
        (Dir::Counters, "port_xmit_discards" | "port_xmit_constraint_errors") => XmitDiscards,
        (Dir::Counters, "port_xmit_wait") => Congestion,
        // mlx5 (drivers/infiniband/hw/mlx5/counters.c) Q counters.
        (
            Dir::HwCounters,
            "out_of_sequence"
            | "packet_seq_err"
            | "implied_nak_seq_err"
            | "local_ack_timeout_err"
            | "rnr_nak_retry_err"
            | "req_transport_retries_exceeded"
            | "req_rnr_retries_exceeded"
            | "roce_adp_retrans"
            | "roce_slow_restart",
        ) => Retransmits,
        // rxe (drivers/infiniband/sw/rxe/rxe_hw_counters.c).
        (
            Dir::HwCounters,
            "out_of_seq_request"
            | "rcvd_seq_err"
            | "completer_retry_err"
            | "retry_exceeded_err"
            | "retry_rnr_exceeded_err",
        ) => Retransmits,
        // mlx5 congestion counters.
        (
            Dir::HwCounters,
            "np_cnp_sent" | "rp_cnp_handled" | "np_ecn_marked_roce_packets" | "rp_cnp_ignored",
        ) => Congestion,
        _ => return None,
    })
}

/// The width of an IB PMA error counter the kernel serves in `counters/`
/// (drivers/infiniband/core/sysfs.c, from the PortCounters attribute of the
/// IBA spec): these saturate at all ones rather than wrap, and a saturated
/// counter can no longer show a rise.
pub fn saturates_at(dir: Dir, name: &str) -> Option<u64> {
    if dir != Dir::Counters {
        return None;
    }
    let bits = match name {
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => 16,
        "link_error_recovery"
        | "link_downed"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => 8,
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => 4,
        _ => return None,
    };
    Some((1u64 << bits) - 1)
}

/// How much a counter rose from `last` to `now`, or `None` for a reset
/// (driver reload, `perfquery -R`, a re-created device): a value below the
/// last one near the top of a 32- or 64-bit range wrapped; any other
/// decrease is a reset, whose interval counts nothing, because what the
/// counter reached after it cannot be told from what it held before.
pub fn rise(last: u64, now: u64) -> Option<u64> {
    if now >= last {
        return Some(now - last);
    }
    const TOP32: u64 = 1 << 32;
    if (TOP32 / 4 * 3..TOP32).contains(&last) && now < TOP32 / 4 {
        return Some(TOP32 - last + now);
    }
    if last >= u64::MAX / 4 * 3 && now < u64::MAX / 4 {
        return Some(u64::MAX - last + now + 1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rises_wraps_and_resets() {
        assert_eq!(rise(5, 9), Some(4));
        assert_eq!(rise(9, 9), Some(0));
        // A driver reload: the counter starts again; nothing is counted.
        assert_eq!(rise(1_000, 3), None);
        assert_eq!(rise(4_000_000_000, 3_000_000_000), None);
        // mlx5's 32-bit Q counters wrap.
        assert_eq!(rise(u64::from(u32::MAX) - 1, 3), Some(5));
        assert_eq!(rise(u64::MAX, 2), Some(3));
    }

    #[test]
    fn names_as_the_kernel_spells_them() {
        assert_eq!(
            class_of(Dir::Counters, "symbol_error"),
            Some(Class::SymbolErrors)
        );
        assert_eq!(class_of(Dir::HwCounters, "symbol_error"), None);
        assert_eq!(
            class_of(Dir::HwCounters, "np_cnp_sent"),
            Some(Class::Congestion)
        );
        assert_eq!(
            class_of(Dir::HwCounters, "rcvd_seq_err"),
            Some(Class::Retransmits)
        );
        assert_eq!(class_of(Dir::Counters, "link_downed"), None);
        assert_eq!(saturates_at(Dir::Counters, "symbol_error"), Some(65_535));
        assert_eq!(
            saturates_at(Dir::Counters, "local_link_integrity_errors"),
            Some(15)
        );
        assert_eq!(saturates_at(Dir::HwCounters, "out_of_sequence"), None);
    }
}
