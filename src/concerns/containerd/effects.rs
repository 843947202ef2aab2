//! containerd's parts of an apply: containerd's own parser on edited configs
//! before anything is written, and what "healthy" means after its restart.

use std::path::PathBuf;

use super::toml::Version;
use super::validate::{self, Validation};
use crate::engine::effect::{LiveCtx, Preflight, Probe};

/// containerd's own parser (`containerd config dump`) on the edited set, main
/// file first; `current` is the set as it is, to tell whose fault it is.
#[derive(Debug)]
pub struct ConfigPreflight {
    pub binary: PathBuf,
    pub candidate: Vec<String>,
    pub current: Vec<String>,
    pub version: Version,
}

impl Preflight for ConfigPreflight {
    fn check(&self) -> Result<String, String> {
        match validate::validate(&self.binary, &self.candidate, self.version) {
            Ok(Validation::Passed(m)) | Ok(Validation::Skipped(m)) => Ok(m),
            Err(e) => Err(match validate::current_fails(&self.binary, &self.current) {
                Some(m) => format!(
                    "containerd cannot read the current config either: {m}; fix it first, nothing was written"
                ),
                None => e.to_string(),
            }),
        }
    }
}

/// After a restart, containerd is healthy when its socket answers and its CRI
/// plugin loaded: a base spec CRI cannot load leaves containerd active but
/// unable to start pods.
#[derive(Debug)]
pub struct CriProbe {
    pub grpc_address: PathBuf,
}

impl Probe for CriProbe {
    fn healthy(&self, cx: &LiveCtx) -> Result<(), String> {
        if cx.host.which("ctr").is_none() {
            return Err("ctr not found".into());
        }
        let address = self.grpc_address.display().to_string();
        let argv = ["ctr", "--address", &address, "plugins", "ls"].map(str::to_owned);
        let out = cx
            .host
            .run(&argv)
            .map_err(|e| format!("socket {address} does not answer: {e}"))?;
        let cri = super::cri_status(&String::from_utf8_lossy(&out))
            .unwrap_or_else(|| "not listed".into());
        if cri == "ok" {
            Ok(())
        } else {
            Err(format!(
                "containerd runs but its CRI plugin is {cri:?}: kubelet cannot start pods (see journalctl -u containerd)"
            ))
        }
    }
}
