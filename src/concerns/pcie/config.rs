//! The `[pcie]` section: what `pcie.aer` watches on the PCIe functions of each
//! RDMA NIC and GPU and the bridges above them (AER error counts and link
//! retraining), and when it warns.

use serde::Deserialize;

use crate::config::Severity;
use crate::config::rdma::parse_window;
use crate::config::section::{Invalid, Section};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcieConfig {
    /// Report `pcie.aer` at all (skipped without an RDMA NIC or GPU on PCI).
    pub enabled: bool,
    /// `pcie.aer` warns when one function's correctable errors rose by more
    /// than this many…
    pub correctable_threshold: u64,
    /// …within this window (`"10m"`, `"1h"`, `"1d"`), in seconds.
    #[serde(rename = "correctable_window", deserialize_with = "window")]
    pub correctable_window_secs: u64,
    /// What an uncorrectable non-fatal error since boot makes the check:
    /// `warn` (default) or `fail`. A fatal one always fails.
    pub nonfatal: Severity,
    /// What a watched function without AER statistics makes the check (no
    /// `aer_dev_*` files: no AER capability, as on most cloud VMs, or a kernel
    /// without AER support): `warn` (default: its errors are not known, and
    /// the message says so, but the node is not taken out of service for a
    /// platform that cannot report them) or `unknown` (not ready).
    pub without_aer: WithoutAer,
}

/// See `PcieConfig::without_aer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WithoutAer {
    Warn,
    Unknown,
}

impl Default for PcieConfig {
    fn default() -> Self {
        PcieConfig {
            enabled: true,
            correctable_threshold: 100,
            correctable_window_secs: 3600,
            nonfatal: Severity::Warn,
            without_aer: WithoutAer::Warn,
        }
    }
}

fn window<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_window(&text)
        .map_err(|e| e.replacen("flap_window", "correctable_window", 1))
        .map_err(serde::de::Error::custom)
}

impl Section for PcieConfig {
    const NAME: &'static str = "pcie";
    fn validate(&self) -> Result<(), Invalid> {
        // 0 would warn at the first correctable error of a healthy link.
        if self.correctable_threshold == 0 {
            return Err(Invalid::new(
                "correctable_threshold",
                "must be at least 1: healthy links see a correctable error now and then; write a number of errors per correctable_window".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::PcieConfig;
    use crate::concerns::registry::SECTIONS;
    use crate::config::{Config, ConfigError, Severity};
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/c.toml"), SECTIONS)
    }

    #[test]
    fn the_section_parses_and_refuses_what_it_cannot_use() {
        let c = parse("[pcie]\ncorrectable_threshold = 5\ncorrectable_window = \"10m\"\nnonfatal = \"fail\"\n")
        .unwrap();
        assert_eq!(c.section::<PcieConfig>().correctable_threshold, 5);
        assert_eq!(c.section::<PcieConfig>().correctable_window_secs, 600);
        assert_eq!(c.section::<PcieConfig>().nonfatal, Severity::Fail);
        assert_eq!(
            c.section::<PcieConfig>().without_aer,
            super::WithoutAer::Warn
        );
        let u = parse("[pcie]\nwithout_aer = \"unknown\"\n").unwrap();
        assert_eq!(
            u.section::<PcieConfig>().without_aer,
            super::WithoutAer::Unknown
        );
        assert!(parse("[pcie]\nwithout_aer = \"ok\"\n").is_err());
        assert_eq!(
            Config::default()
                .section::<PcieConfig>()
                .correctable_window_secs,
            3600
        );
        let e = parse("[pcie]\ncorrectable_window = \"1w\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("correctable_window \"1w\" is not a duration"),
            "{e}"
        );
        let e = parse("[pcie]\ncorrectable_threshold = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("correctable_threshold under [pcie]"), "{e}");
        assert!(e.starts_with("/c.toml:2:"), "{e}");
    }
}
