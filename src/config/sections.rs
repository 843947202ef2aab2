//! The sections for the node's kernel, the agent's own service and its
//! outputs: `[systemd]`, `[daemon]`, `[http]`, `[nfd]`; each with
//! its own checks (`Section`).

use crate::config::section::Invalid;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::section::{Section, absolute};
use crate::host::limit::Limit;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NfdConfig {
    pub enabled: bool,
    /// A feature file in NFD's local source directory.
    pub path: PathBuf,
}

impl Default for NfdConfig {
    fn default() -> Self {
        NfdConfig {
            enabled: false,
            path: "/etc/kubernetes/node-feature-discovery/features.d/rdma-node-agent".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub enabled: bool,
    /// `host:port` (loopback by default: nothing here is for the network) or `unix:/path`.
    pub listen: String,
    /// Connections beyond this are closed at once.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            enabled: true,
            listen: DEFAULT_LISTEN.into(),
            max_connections: 4096,
        }
    }
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9470";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SystemdConfig {
    pub enabled: bool,
    /// No longer read (the drop-in goes to the unit that runs containerd): an
    /// old config still loads, with a warning (`Config::warnings`).
    pub units: Option<Vec<String>>,
    pub memlock: Limit,
    /// The drop-in's file name under /etc/systemd/system/<unit>.d/.
    pub dropin: String,
}

impl Default for SystemdConfig {
    fn default() -> Self {
        SystemdConfig {
            enabled: true,
            units: None,
            memlock: Limit::UNLIMITED,
            dropin: "50-rdma-node-agent.conf".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Full reconcile at least this often, besides file changes and SIGHUP.
    pub interval_secs: u64,
    /// How long file-change events are gathered before one reconcile.
    pub debounce_ms: u64,
    /// How long a restarted unit has to become active and answer.
    pub restart_timeout_secs: u64,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            interval_secs: 300,
            debounce_ms: 200,
            restart_timeout_secs: 60,
        }
    }
}

impl Section for NfdConfig {
    const NAME: &'static str = "nfd";
    fn validate(&self) -> Result<(), Invalid> {
        absolute("path", &self.path)
    }
}

impl Section for HttpConfig {
    const NAME: &'static str = "http";
    fn validate(&self) -> Result<(), Invalid> {
        let ok = match self.listen.strip_prefix("unix:") {
            Some(p) => Path::new(p).is_absolute(),
            None => self.listen.parse::<std::net::SocketAddr>().is_ok(),
        };
        if !ok {
            return Err(Invalid::new(
                "listen",
                format!(
                    "{:?} is neither host:port (127.0.0.1:9470, [::1]:9470) nor unix:/absolute/path",
                    self.listen
                ),
            ));
        }
        if self.max_connections == 0 {
            return Err(Invalid::new(
                "max_connections",
                "0 would refuse every probe".into(),
            ));
        }
        Ok(())
    }
}

impl Section for SystemdConfig {
    const NAME: &'static str = "systemd";
    fn validate(&self) -> Result<(), Invalid> {
        // systemd reads only *.conf files in a unit's .d directory.
        let d = &self.dropin;
        if d.contains('/') || d.starts_with('.') || !d.ends_with(".conf") || d.len() <= 5 {
            return Err(Invalid::new(
                "dropin",
                format!("{d:?} must be a file name ending in .conf (systemd reads no other)"),
            ));
        }
        Ok(())
    }
}

impl Section for DaemonConfig {
    const NAME: &'static str = "daemon";
    fn validate(&self) -> Result<(), Invalid> {
        if self.interval_secs == 0 {
            return Err(Invalid::new("interval_secs", "must be at least 1".into()));
        }
        if self.restart_timeout_secs == 0 {
            return Err(Invalid::new(
                "restart_timeout_secs",
                "must be at least 1: no restart could be verified".into(),
            ));
        }
        Ok(())
    }
}
