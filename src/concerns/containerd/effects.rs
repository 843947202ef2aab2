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
/// unable to start pods. Asked with the `ctr` the layout bundles (k3s, rke2 and
/// microk8s put none on PATH), else the one on PATH, else over CRI itself: its
/// `RuntimeService/Status` answers only when the CRI plugin loaded.
#[derive(Debug)]
pub struct CriProbe {
    pub grpc_address: PathBuf,
    /// The layout's own `ctr`, when it bundles one.
    pub ctr: Option<PathBuf>,
}

impl Probe for CriProbe {
    fn healthy(&self, cx: &LiveCtx) -> Result<(), String> {
        let address = self.grpc_address.display().to_string();
        let ctr = self
            .ctr
            .clone()
            .filter(|p| cx.host.which(&p.to_string_lossy()).is_some())
            .or_else(|| cx.host.which("ctr"));
        let Some(ctr) = ctr else {
            return cx
                .host
                .host()
                .cri_config(&self.grpc_address)
                .map(|_| ())
                .map_err(|e| {
                    format!(
                        "containerd's CRI does not answer on {address} (no ctr to ask besides): {e}"
                    )
                });
        };
        let argv = [
            ctr.to_string_lossy().into_owned(),
            "--address".into(),
            address.clone(),
            "plugins".into(),
            "ls".into(),
        ];
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
