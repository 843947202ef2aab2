//! The mlx5 driver's documented fatal messages, as the kernel prints them
//! (drivers/net/ethernet/mellanox/mlx5/core/ in the kernel source). Every
//! device message of mlx5_core begins `mlx5_core <PCI address>: ` (dev_printk),
//! and mlx5_core_err/warn add `<function>:<line>:(pid <n>): `, so the formats
//! below are matched as substrings of the message.
//!
//! A record is counted for its PCI address and pattern; its text never leaves
//! this module (no raw text in metrics or state).

use crate::host::kmsg::Record;

/// What a pattern means for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Warn,
    Fail,
}

/// One documented message.
pub struct Pattern {
    /// The stable name in metrics, state and messages.
    pub name: &'static str,
    pub severity: Severity,
    /// What it says, for the check's message.
    pub meaning: &'static str,
    matches: fn(&str) -> bool,
}

/// health.c, poll_health(): `mlx5_core_err(dev, "Fatal error %u detected\n", fatal_error)`
/// once check_fatal_sensors() reads a fatal state (firmware fatal, PCI unreachable).
fn fatal_error(t: &str) -> bool {
    t.split("Fatal error ").skip(1).any(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with(" detected")
    })
}

/// health.c, poll_health(): `"device's health compromised - reached miss count\n"`
/// (older kernels: `"device's health compromised\n"`): the firmware's health
/// counter stopped for MAX_MISSES polls.
fn health_compromised(t: &str) -> bool {
    t.contains("device's health compromised")
}

/// cmd.c, wait_func(): `"%s(0x%x) timeout. Will cause a leak of a command resource\n"`,
/// and cb_timeout_handler(): `"cmd[%d]: %s(0x%x) Async, timeout. Will cause a leak of
/// a command resource\n"`: a firmware command never completed.
fn cmd_timeout(t: &str) -> bool {
    t.contains("timeout. Will cause a leak of a command resource")
}

/// health.c, print_health_info(): `"Health issue observed, %s, severity(%d) %s:\n"`
/// (5.18 and later), or `"synd 0x%x: %s\n"` (earlier): the firmware's health
/// buffer carries a syndrome. `ext_synd 0x%04x` is its companion line, not another.
fn fw_syndrome(t: &str) -> bool {
    t.contains("Health issue observed, ") || t.contains(": synd 0x")
}

pub static PATTERNS: &[Pattern] = &[
    Pattern {
        name: "fatal_error",
        severity: Severity::Fail,
        meaning: "the driver detected a fatal device error (\"Fatal error N detected\")",
        matches: fatal_error,
    },
    Pattern {
        name: "health_compromised",
        severity: Severity::Fail,
        meaning: "the firmware stopped answering the driver's health poll (\"device's health compromised\")",
        matches: health_compromised,
    },
    Pattern {
        name: "cmd_timeout",
        severity: Severity::Fail,
        meaning: "a firmware command timed out (\"timeout. Will cause a leak of a command resource\")",
        matches: cmd_timeout,
    },
    Pattern {
        name: "fw_syndrome",
        severity: Severity::Warn,
        meaning: "the firmware reported a health syndrome (\"Health issue observed\" / \"synd 0x…\")",
        matches: fw_syndrome,
    },
];

pub const DRIVER_PREFIX: &str = "mlx5_core ";

/// `(PCI address, pattern name)` of a record that is one of the patterns.
pub fn classify(r: &Record) -> Option<(String, &'static str)> {
    let rest = r.text.strip_prefix(DRIVER_PREFIX)?;
    let (device, message) = rest.split_once(": ")?;
    let device = r
        .device
        .as_deref()
        .and_then(|d| d.strip_prefix("+pci:"))
        .unwrap_or(device);
    let p = PATTERNS.iter().find(|p| (p.matches)(message))?;
    Some((device.to_owned(), p.name))
}

pub fn pattern(name: &str) -> Option<&'static Pattern> {
    PATTERNS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(text: &str) -> Record {
        Record {
            seq: 1,
            level: 3,
            facility: 0,
            text: text.into(),
            device: None,
        }
    }

    #[test]
    fn each_format_string_matches_and_neighbours_do_not() {
        let c = |t: &str| classify(&rec(t)).map(|(d, p)| format!("{d} {p}"));
        assert_eq!(
            c("mlx5_core 0000:41:00.0: poll_health:733:(pid 0): Fatal error 1 detected").as_deref(),
            Some("0000:41:00.0 fatal_error")
        );
        assert_eq!(
            c("mlx5_core 0000:41:00.0: poll_health:733:(pid 0): Fatal error detected"),
            None
        );
        assert_eq!(
            c("mlx5_core 0000:03:00.0: cb_timeout_handler:877:(pid 9): cmd[3]: QUERY_VPORT_COUNTER(0x770) Async, timeout. Will cause a leak of a command resource").as_deref(),
            Some("0000:03:00.0 cmd_timeout")
        );
        assert_eq!(
            c("mlx5_core 0000:03:00.0: print_health_info:424:(pid 0): Health issue observed, firmware internal error, severity(3) ERROR:").as_deref(),
            Some("0000:03:00.0 fw_syndrome")
        );
        assert_eq!(
            c("mlx5_core 0000:03:00.0: print_health_info:430:(pid 0): ext_synd 0x8f06"),
            None
        );
        // Another driver's words are not mlx5's.
        assert_eq!(c("bnxt_en 0000:03:00.0: device's health compromised"), None);
    }
}
