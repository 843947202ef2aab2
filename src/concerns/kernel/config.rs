//! The `[kernel]` section: the modules `kernel.modules` requires loaded (with
//! files matching the running kernel) and the DKMS modules `kernel.dkms` gates.

use serde::Deserialize;

use crate::config::section::{Invalid, Section};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KernelConfig {
    pub enabled: bool,
    /// Modules that must be loaded, with their files matching the running kernel.
    pub required_modules: Vec<String>,
    /// DKMS modules the RDMA stack needs; empty: every module registered in /var/lib/dkms.
    pub dkms_modules: Vec<String>,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            enabled: true,
            required_modules: ["ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm"]
                .map(String::from)
                .to_vec(),
            dkms_modules: Vec::new(),
        }
    }
}

impl Section for KernelConfig {
    const NAME: &'static str = "kernel";
    fn validate(&self) -> Result<(), Invalid> {
        for (key, names) in [
            ("required_modules", &self.required_modules),
            ("dkms_modules", &self.dkms_modules),
        ] {
            if let Some(bad) = names
                .iter()
                .find(|m| m.is_empty() || m.contains(['/', ' ', '\t']))
            {
                return Err(Invalid::new(
                    key,
                    format!("{bad:?} is not a module name (ib_core, mlx5_core)"),
                ));
            }
        }
        Ok(())
    }
}
