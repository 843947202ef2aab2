//! containerd's parts of an apply: containerd's own parser on edited configs
//! before anything is written, and what "healthy" means after its restart.

use std::path::PathBuf;

use super::ContainerdError;
use super::toml::Version;
use super::validate::{self, Validation};
use crate::engine::effect::{CommandError, LiveCtx, Preflight, Probe, Rejected, Unhealthy};
use crate::host::cri::CriError;

/// Why containerd's own parser refused the edited config set.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The files as they are fail too: the node is broken, not the edit.
    #[error(
        "containerd cannot read the current config either: {current}; fix it first, nothing was written"
    )]
    CurrentBroken {
        current: String,
        #[source]
        candidate: ContainerdError,
    },
    #[error(transparent)]
    Candidate(ContainerdError),
}

/// Why containerd is not healthy after its restart, and which socket said so.
#[derive(Debug, thiserror::Error)]
pub enum CriUnhealthy {
    #[error("containerd's CRI does not answer on {} (no ctr to ask besides): {source}", .address.display())]
    CriSilent {
        address: PathBuf,
        #[source]
        source: CriError,
    },
    #[error("socket {} does not answer: {source}", .address.display())]
    SocketSilent {
        address: PathBuf,
        #[source]
        source: CommandError,
    },
    #[error(
        "containerd runs but its CRI plugin is {state:?}: kubelet cannot start pods (see journalctl -u containerd)"
    )]
    PluginNotLoaded { address: PathBuf, state: String },
}

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
    fn check(&self) -> Result<String, Rejected> {
        match validate::validate(&self.binary, &self.candidate, self.version) {
            Ok(Validation::Passed(m)) | Ok(Validation::Skipped(m)) => Ok(m),
            Err(candidate) => Err(Rejected::new(
                match validate::current_fails(&self.binary, &self.current) {
                    Some(current) => Refused::CurrentBroken { current, candidate },
                    None => Refused::Candidate(candidate),
                },
            )),
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
    fn healthy(&self, cx: &LiveCtx) -> Result<(), Unhealthy> {
        self.ask(cx).map_err(Unhealthy::new)
    }
}

impl CriProbe {
    fn ask(&self, cx: &LiveCtx) -> Result<(), CriUnhealthy> {
        let address = self.grpc_address.clone();
        let ctr = self
            .ctr
            .clone()
            .filter(|p| cx.host.which(&p.to_string_lossy()).is_some())
            .or_else(|| cx.host.which("ctr"));
        let Some(ctr) = ctr else {
            return match cx.host.files().reader().cri_config(&self.grpc_address) {
                Ok(_) => Ok(()),
                Err(source) => Err(CriUnhealthy::CriSilent { address, source }),
            };
        };
        let argv = [
            ctr.to_string_lossy().into_owned(),
            "--address".into(),
            address.display().to_string(),
            "plugins".into(),
            "ls".into(),
        ];
        let out = match cx.host.run(&argv) {
            Ok(out) => out,
            Err(source) => return Err(CriUnhealthy::SocketSilent { address, source }),
        };
        let state = super::cri_status(&String::from_utf8_lossy(&out))
            .unwrap_or_else(|| "not listed".into());
        if state == "ok" {
            Ok(())
        } else {
            Err(CriUnhealthy::PluginNotLoaded { address, state })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fakes::FakeHost;
    use crate::host::stop::Stop;

    fn ask(host: &FakeHost) -> Result<(), Unhealthy> {
        let stop = Stop::new();
        let cx = LiveCtx {
            host,
            manager: None,
            stop: &stop,
        };
        CriProbe {
            grpc_address: "/run/containerd/containerd.sock".into(),
            ctr: None,
        }
        .healthy(&cx)
    }

    /// The probe's error is typed: which socket, and what `ctr` said or what
    /// the CRI plugin's state is; its text is the one `apply` prints.
    #[test]
    fn an_unhealthy_containerd_says_which_socket_and_why() {
        let silent = FakeHost::default();
        *silent.outputs.lock().unwrap() = [Err(CommandError::Failed {
            program: "/usr/sbin/ctr".into(),
            code: Some(1),
            stderr: "connection refused".into(),
        })]
        .into();
        let e = ask(&silent).unwrap_err();
        match e.cause().downcast_ref::<CriUnhealthy>() {
            Some(CriUnhealthy::SocketSilent { address, source }) => {
                assert_eq!(
                    address,
                    std::path::Path::new("/run/containerd/containerd.sock")
                );
                assert!(matches!(source, CommandError::Failed { code: Some(1), .. }));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "socket /run/containerd/containerd.sock does not answer: failed: connection refused"
        );

        let broken = FakeHost {
            stdout: b"io.containerd.grpc.v1  cri  linux/amd64  error\n".to_vec(),
            ..FakeHost::default()
        };
        let e = ask(&broken).unwrap_err();
        assert!(
            matches!(
                e.cause().downcast_ref::<CriUnhealthy>(),
                Some(CriUnhealthy::PluginNotLoaded { state, .. }) if state == "error"
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("CRI plugin is \"error\""), "{e}");

        let ok = FakeHost {
            stdout: b"io.containerd.grpc.v1  cri  linux/amd64  ok\n".to_vec(),
            ..FakeHost::default()
        };
        assert!(ask(&ok).is_ok());
    }
}
