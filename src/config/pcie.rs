//! The `[pcie]` section: what `pcie.aer` watches on the PCIe functions of each
//! RDMA NIC and GPU and the bridges above them (AER error counts and link
//! retraining), and when it warns.

use serde::Deserialize;

use super::Severity;

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
    super::rdma::parse_window(&text)
        .map_err(|e| e.replacen("flap_window", "correctable_window", 1))
        .map_err(serde::de::Error::custom)
}

impl super::section::Section for PcieConfig {
    const NAME: &'static str = "pcie";
    fn validate(&self) -> Result<(), (&'static str, String)> {
        // 0 would warn at the first correctable error of a healthy link.
        if self.correctable_threshold == 0 {
            return Err((
                "correctable_threshold",
                "must be at least 1: healthy links see a correctable error now and then; write a number of errors per correctable_window".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Severity};
    use std::path::Path;

    #[test]
    fn the_section_parses_and_refuses_what_it_cannot_use() {
        let c = Config::parse(
            "[pcie]\ncorrectable_threshold = 5\ncorrectable_window = \"10m\"\nnonfatal = \"fail\"\n",
            Path::new("/c.toml"),
        )
        .unwrap();
        assert_eq!(c.pcie.correctable_threshold, 5);
        assert_eq!(c.pcie.correctable_window_secs, 600);
        assert_eq!(c.pcie.nonfatal, Severity::Fail);
        assert_eq!(c.pcie.without_aer, super::WithoutAer::Warn);
        let u = Config::parse("[pcie]\nwithout_aer = \"unknown\"\n", Path::new("/c.toml")).unwrap();
        assert_eq!(u.pcie.without_aer, super::WithoutAer::Unknown);
        assert!(Config::parse("[pcie]\nwithout_aer = \"ok\"\n", Path::new("/c.toml")).is_err());
        assert_eq!(Config::default().pcie.correctable_window_secs, 3600);
        let e = Config::parse(
            "[pcie]\ncorrectable_window = \"1w\"\n",
            Path::new("/c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("correctable_window \"1w\" is not a duration"),
            "{e}"
        );
        let e = Config::parse("[pcie]\ncorrectable_threshold = 0\n", Path::new("/c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("correctable_threshold under [pcie]"), "{e}");
        assert!(e.starts_with("/c.toml:2:"), "{e}");
    }
}
