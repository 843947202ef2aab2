//! The `[driver_health]` section: whether `driver.health` runs, which devlink
//! instances it watches beyond the RDMA NICs', and how much of the kernel log
//! one pass may read.

use crate::config::section::{Invalid, Section};
use serde::Deserialize;

/// At most this much of the kernel log per pass: the ring buffer is
/// 2^CONFIG_LOG_BUF_SHIFT bytes (Debian: 256 KiB) unless `log_buf_len=` grows it.
const MAX_KMSG_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DriverHealthConfig {
    /// Run `driver.health` at all.
    pub enabled: bool,
    /// devlink instances (`bus/device`: `pci/0000:81:00.0`, `netdevsim/netdevsim10`)
    /// watched beside those of the RDMA NICs, which are always watched.
    pub also_watch: Vec<String>,
    /// Read the kernel log (`/dev/kmsg`) for the mlx5 driver's fatal messages.
    pub kernel_log: bool,
    /// Caps of one pass over the kernel log.
    pub kernel_log_max_bytes: u64,
    pub kernel_log_max_records: u64,
}

impl Default for DriverHealthConfig {
    fn default() -> Self {
        DriverHealthConfig {
            enabled: true,
            also_watch: Vec::new(),
            kernel_log: true,
            kernel_log_max_bytes: 8 << 20,
            kernel_log_max_records: 200_000,
        }
    }
}

impl Section for DriverHealthConfig {
    const NAME: &'static str = "driver_health";
    fn validate(&self) -> Result<(), Invalid> {
        if let Some(bad) = self.also_watch.iter().find(|i| {
            let parts: Vec<&str> = i.split('/').collect();
            parts.len() != 2
                || parts
                    .iter()
                    .any(|p| p.is_empty() || p.contains(char::is_whitespace))
        }) {
            return Err(Invalid::new(
                "also_watch",
                format!(
                    "{bad:?} is not a devlink instance: write it as `devlink dev show` prints it, bus/device (\"pci/0000:81:00.0\")"
                ),
            ));
        }
        if self.kernel_log_max_bytes == 0 || self.kernel_log_max_bytes > MAX_KMSG_BYTES {
            return Err(Invalid::new(
                "kernel_log_max_bytes",
                format!(
                    "{} is not between 1 and {MAX_KMSG_BYTES}",
                    self.kernel_log_max_bytes
                ),
            ));
        }
        if self.kernel_log_max_records == 0 {
            return Err(Invalid::new(
                "kernel_log_max_records",
                "0 would read nothing".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_and_caps_are_validated() {
        assert_eq!(DriverHealthConfig::default().validate(), Ok(()));
        let bad = DriverHealthConfig {
            also_watch: vec!["0000:81:00.0".into()],
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "also_watch");
        let big = DriverHealthConfig {
            kernel_log_max_bytes: 1 << 40,
            ..Default::default()
        };
        assert_eq!(big.validate().unwrap_err().key, "kernel_log_max_bytes");
    }
}
