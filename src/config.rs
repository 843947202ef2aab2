//! The agent's own configuration, `/etc/rdma-node-agent/config.toml` under the root.
//! Parsed strictly: an unknown key is an error naming the key, line and column.
//! Every key and default is documented in `etc/rdma-node-agent/config.toml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::host::{Host, HostError};

pub mod globs;
pub mod gpudirect;
pub mod rdma;
pub mod readiness;

use crate::host::limit::Limit;

pub const DEFAULT_PATH: &str = "/etc/rdma-node-agent/config.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub mode: Mode,
    pub containerd: ContainerdConfig,
    pub systemd: SystemdConfig,
    pub pods: PodsConfig,
    pub daemon: DaemonConfig,
    pub http: HttpConfig,
    pub nfd: NfdConfig,
    pub rdma: rdma::RdmaConfig,
    pub gpudirect: gpudirect::GpuDirectConfig,
    pub kernel: KernelConfig,
    pub kubelet: readiness::KubeletConfig,
    /// What the file says that is no longer read, and what to write instead.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

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

/// What `serve` does with what it finds: converge, or only report (never writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enforce,
    Report,
}

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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdConfig {
    pub enabled: bool,
    /// The config containerd reads, when the agent must not find it itself;
    /// unset: found from the unit that runs containerd (host::runtime).
    pub config_path: Option<PathBuf>,
    pub memlock: Limit,
    /// Runtime handlers that get the base spec; empty = every CRI handler plus the default.
    pub handlers: Vec<String>,
    /// Where the agent writes its base spec for handlers that have none of their own.
    pub base_spec_path: PathBuf,
    /// Other rlimits to set in the base spec (soft = hard), e.g. `RLIMIT_NOFILE = 1048576`.
    /// Unlisted rlimits are inherited from containerd, as without a base spec.
    pub rlimits: BTreeMap<RlimitName, Limit>,
    /// The containerd binary used to validate an edited config (`containerd config dump`).
    pub binary: PathBuf,
    /// The systemd unit that runs containerd; unset: detected (containerd.service,
    /// k3s/k3s-agent, rke2-server/rke2-agent, microk8s's snap service).
    pub unit: Option<String>,
    /// The installed containerd's major version (1 or 2), when the agent cannot ask
    /// it: it decides how imported files merge. Unset: `containerd --version`.
    pub daemon_version: Option<u32>,
    /// A node without containerd fails `containerd.memlock` instead of skipping it.
    pub required: bool,
}

impl ContainerdConfig {
    /// What this section says about where containerd is, for its discovery.
    pub fn hints(&self) -> crate::host::runtime::Hints {
        crate::host::runtime::Hints {
            config_path: self.config_path.clone(),
            unit: self.unit.clone(),
        }
    }
}

impl Default for ContainerdConfig {
    fn default() -> Self {
        ContainerdConfig {
            enabled: true,
            config_path: None,
            memlock: Limit::UNLIMITED,
            handlers: Vec::new(),
            base_spec_path: "/etc/containerd/rdma-node-agent/base-spec.json".into(),
            rlimits: BTreeMap::new(),
            binary: "containerd".into(),
            unit: None,
            daemon_version: None,
            required: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PodsConfig {
    /// How a running pod container whose locked-memory limit is below target is reported.
    pub below_target: Severity,
    /// How `pods.rdma` reports a container with RDMA devices that lacks
    /// CAP_IPC_LOCK or whose locked-memory limit is below target.
    pub rdma: Severity,
}

impl Default for PodsConfig {
    fn default() -> Self {
        PodsConfig {
            below_target: Severity::Warn,
            rdma: Severity::Warn,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warn,
    Fail,
}

/// The rlimits an OCI spec may carry, other than RLIMIT_MEMLOCK (which has its own key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RlimitName(String);

const RLIMITS: &[&str] = &[
    "RLIMIT_AS",
    "RLIMIT_CORE",
    "RLIMIT_CPU",
    "RLIMIT_DATA",
    "RLIMIT_FSIZE",
    "RLIMIT_LOCKS",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_RSS",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
    "RLIMIT_SIGPENDING",
    "RLIMIT_STACK",
];

impl RlimitName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for RlimitName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "RLIMIT_MEMLOCK" {
            return Err(serde::de::Error::custom(
                "set RLIMIT_MEMLOCK with containerd.memlock, not in containerd.rlimits",
            ));
        }
        if RLIMITS.contains(&s.as_str()) {
            Ok(RlimitName(s))
        } else {
            Err(serde::de::Error::custom(format!(
                "unknown rlimit {s:?}; expected one of {}",
                RLIMITS.join(", ")
            )))
        }
    }
}

impl Config {
    /// Reads the config under the root; a missing file means the built-in defaults.
    pub fn load(host: &Host, path: &Path) -> Result<Config, ConfigError> {
        // It decides what a root daemon writes: refused unless only root can change it.
        match host.read_trusted(path, "the agent config")? {
            None => Ok(Config::default()),
            Some(d) => {
                let text = String::from_utf8(d.bytes).map_err(|_| HostError::NotUtf8 {
                    path: host.path(path),
                })?;
                let cfg = Config::parse(&text, &host.path(path))?;
                for w in &cfg.warnings {
                    tracing::warn!("{w}");
                }
                Ok(cfg)
            }
        }
    }

    pub fn parse(text: &str, shown_path: &Path) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            ConfigError::Invalid {
                path: shown_path.to_owned(),
                line,
                column,
                message: e.message().to_owned(),
            }
        })?;
        cfg.migrate(shown_path);
        Ok(cfg)
    }

    /// `[systemd] units` named the unit that runs containerd a second time, and
    /// the two could disagree: one entry becomes `[containerd] unit` (when that
    /// is unset), and either way the file gets a warning saying what to write.
    fn migrate(&mut self, shown_path: &Path) {
        let Some(units) = self.systemd.units.take() else {
            return;
        };
        let shown = shown_path.display();
        match (units.as_slice(), &self.containerd.unit) {
            ([one], None) => {
                self.warnings.push(format!(
                    "{shown}: `units` under [systemd] is no longer read; it is taken as `unit = {one:?}` under [containerd], the one setting for the unit that runs containerd (its restart and its LimitMEMLOCK drop-in): write that instead"
                ));
                if one != "containerd.service" {
                    self.containerd.unit = Some(one.clone());
                }
            }
            _ => self.warnings.push(format!(
                "{shown}: `units` under [systemd] ({}) is no longer read: the LimitMEMLOCK drop-in goes to the unit that runs containerd, detected or set by `unit = \"…\"` under [containerd]; delete the line",
                units.join(", ")
            )),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        assert_eq!(Limit::parse("unlimited"), Ok(Limit::UNLIMITED));
        assert_eq!(Limit::parse("infinity"), Ok(Limit::UNLIMITED));
        assert_eq!(Limit::parse("4MiB"), Ok(Limit(4 << 20)));
        assert_eq!(Limit::parse("4M"), Ok(Limit(4 << 20)));
        assert_eq!(Limit::parse("65536"), Ok(Limit(65536)));
        assert!(Limit::parse("4MB").unwrap_err().contains("decimal"));
        assert!(Limit::parse("lots").is_err());
        assert!(Limit::parse("99999999999TiB").is_err());
        assert_eq!(Limit(4 << 20).to_string(), "4MiB");
        assert_eq!(Limit::UNLIMITED.to_string(), "unlimited");
        assert_eq!(Limit(1000).to_string(), "1000 bytes");
    }

    #[test]
    fn defaults_when_empty() {
        let c = Config::parse("", Path::new("c.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert!(c.containerd.memlock.is_unlimited());
    }

    #[test]
    fn full_config() {
        let c = Config::parse(
            r#"
[containerd]
memlock = "4MiB"
handlers = ["runc", "nvidia"]
[containerd.rlimits]
RLIMIT_NOFILE = 1048576
[pods]
below_target = "fail"
"#,
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(c.containerd.memlock, Limit(4 << 20));
        assert_eq!(c.containerd.handlers, vec!["runc", "nvidia"]);
        assert_eq!(c.pods.below_target, Severity::Fail);
        assert_eq!(c.containerd.rlimits.len(), 1);
    }

    #[test]
    fn unknown_key_names_key_line_and_column() {
        let e = Config::parse("[containerd]\nmemlok = \"4MiB\"\n", Path::new("/x/c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/x/c.toml:2:1: "), "{e}");
        assert!(e.contains("memlok"), "{e}");
    }

    #[test]
    fn bad_values_are_located() {
        let e = Config::parse("[containerd]\nmemlock = \"4MB\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:2:11: "), "{e}");
        assert!(e.contains("decimal"), "{e}");
        let e = Config::parse(
            "[containerd.rlimits]\nRLIMIT_MEMLOCK = 1\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("containerd.memlock"), "{e}");
    }
}
