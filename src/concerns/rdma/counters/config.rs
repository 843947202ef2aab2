//! The `[counters]` section: the window `rdma.counters` rates each port's error
//! counters over, and per class the count within it that warns or fails. The
//! defaults and their sources are on docs/checks/rdma.counters.md.

use crate::config::section::{Invalid, Section};
use serde::Deserialize;

use crate::config::rdma::parse_window;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CountersConfig {
    /// Read and rate the port counters at all.
    pub enabled: bool,
    /// The window the counts are taken over (`"1h"`, `"30m"`), in seconds.
    #[serde(rename = "window", deserialize_with = "window")]
    pub window_secs: u64,
    /// Per class: warn (or fail) when this many or more counted within the
    /// window; 0 never does.
    pub symbol_errors_warn: u64,
    pub symbol_errors_fail: u64,
    pub link_integrity_warn: u64,
    pub link_integrity_fail: u64,
    pub rcv_errors_warn: u64,
    pub rcv_errors_fail: u64,
    pub xmit_discards_warn: u64,
    pub xmit_discards_fail: u64,
    pub retransmits_warn: u64,
    pub retransmits_fail: u64,
    pub congestion_warn: u64,
    pub congestion_fail: u64,
}

fn window<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_window(&text).map_err(serde::de::Error::custom)
}

impl Default for CountersConfig {
    fn default() -> Self {
        CountersConfig {
            enabled: true,
            window_secs: 3600,
            // infiniband-diags error_thresholds: SymbolErrorCounter=10 (more
            // than 10 is reported); NVSentinel: more than 120 an hour is fatal.
            symbol_errors_warn: 11,
            symbol_errors_fail: 121,
            // NVSentinel: any local link integrity or buffer overrun error is
            // fatal; error_thresholds: LinkErrorRecoveryCounter=10.
            link_integrity_warn: 1,
            link_integrity_fail: 11,
            // error_thresholds: PortRcvErrors=10; NVSentinel: more than 10/s.
            rcv_errors_warn: 11,
            rcv_errors_fail: 36_001,
            // error_thresholds: PortXmitDiscards=100.
            xmit_discards_warn: 101,
            xmit_discards_fail: 0,
            // NVSentinel: local_ack_timeout_err more than 1/s.
            retransmits_warn: 3_601,
            retransmits_fail: 0,
            // error_thresholds: PortXmitWait=1000.
            congestion_warn: 1_001,
            congestion_fail: 0,
        }
    }
}

impl CountersConfig {
    /// (warn, fail) for a class by its name (`symbol_errors`).
    pub fn thresholds(&self, class: &str) -> (u64, u64) {
        match class {
            "symbol_errors" => (self.symbol_errors_warn, self.symbol_errors_fail),
            "link_integrity" => (self.link_integrity_warn, self.link_integrity_fail),
            "rcv_errors" => (self.rcv_errors_warn, self.rcv_errors_fail),
            "xmit_discards" => (self.xmit_discards_warn, self.xmit_discards_fail),
            "retransmits" => (self.retransmits_warn, self.retransmits_fail),
            "congestion" => (self.congestion_warn, self.congestion_fail),
            _ => (0, 0),
        }
    }
}

impl Section for CountersConfig {
    const NAME: &'static str = "counters";
    fn validate(&self) -> Result<(), Invalid> {
        // A fail below its warn would skip the warning: refused, naming both.
        let pairs: [(&'static str, u64, u64); 6] = [
            (
                "symbol_errors_fail",
                self.symbol_errors_warn,
                self.symbol_errors_fail,
            ),
            (
                "link_integrity_fail",
                self.link_integrity_warn,
                self.link_integrity_fail,
            ),
            (
                "rcv_errors_fail",
                self.rcv_errors_warn,
                self.rcv_errors_fail,
            ),
            (
                "xmit_discards_fail",
                self.xmit_discards_warn,
                self.xmit_discards_fail,
            ),
            (
                "retransmits_fail",
                self.retransmits_warn,
                self.retransmits_fail,
            ),
            (
                "congestion_fail",
                self.congestion_warn,
                self.congestion_fail,
            ),
        ];
        for (key, warn, fail) in pairs {
            if fail != 0 && warn != 0 && fail < warn {
                let class = key.trim_end_matches("_fail");
                return Err(Invalid::new(
                    key,
                    format!(
                        "{fail} is below {class}_warn = {warn}: a class fails at or above its warning (0 turns either off)"
                    ),
                ));
            }
        }
        if self.window_secs < 60 {
            return Err(Invalid::new(
                "window",
                format!(
                    "{}s is shorter than a minute: counts over a reconcile or two are noise; use \"1h\" or more",
                    self.window_secs
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::concerns::registry::SECTIONS;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn a_fail_below_its_warn_is_refused_naming_the_key() {
        let e = Config::parse(
            "[counters]\nsymbol_errors_warn = 50\nsymbol_errors_fail = 20\n",
            Path::new("c.toml"),
            SECTIONS,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("c.toml:3:1: symbol_errors_fail under [counters]"),
            "{e}"
        );
        let c = Config::parse(
            "[counters]\nwindow = \"1d\"\n",
            Path::new("c.toml"),
            SECTIONS,
        )
        .unwrap();
        assert_eq!(c.section::<super::CountersConfig>().window_secs, 86_400);
        assert!(
            Config::parse(
                "[counters]\nwindow = \"30s\"\n",
                Path::new("c.toml"),
                SECTIONS
            )
            .is_err()
        );
    }
}
