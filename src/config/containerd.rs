//! The `[containerd]` section: which containerd, which config, the memlock
//! and rlimits its base specs carry; with its own checks (`Section`).

use crate::config::section::Invalid;
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use super::section::{Section, absolute};
use crate::host::limit::Limit;

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
    /// How containers get `memlock`: containerd's base spec, the NRI plugin, or both.
    pub memlock_via: super::nri::MemlockVia,
    /// The NRI socket of the running containerd.
    pub nri_socket: PathBuf,
    /// The NRI plugin index (two digits): its place among containerd's plugins.
    pub nri_index: String,
    /// Container or pod annotations that ask the NRI plugin for the target
    /// memlock without an RDMA device in the container.
    pub nri_annotations: Vec<String>,
    /// The namespaces whose pods may ask by annotation (none: no pod may; any
    /// pod can annotate itself, so this is the admin's allow-list).
    pub nri_annotation_namespaces: Vec<String>,
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
            memlock_via: super::nri::MemlockVia::BaseSpec,
            nri_socket: crate::host::nri::DEFAULT_SOCKET.into(),
            nri_index: "10".into(),
            nri_annotations: vec![super::nri::ANNOTATION.into()],
            nri_annotation_namespaces: Vec::new(),
        }
    }
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

impl Section for ContainerdConfig {
    const NAME: &'static str = "containerd";
    fn validate(&self) -> Result<(), Invalid> {
        absolute("base_spec_path", &self.base_spec_path)?;
        absolute("nri_socket", &self.nri_socket)?;
        super::nri::index(&self.nri_index).map_err(|e| Invalid::new("nri_index", e))?;
        if let Some(p) = &self.config_path {
            absolute("config_path", p)?;
        }
        if let Some(u) = &self.unit {
            if !u.ends_with(".service") || u.contains('/') {
                return Err(Invalid::new(
                    "unit",
                    format!("{u:?} is not a service unit name"),
                ));
            }
        }
        if self.binary.as_os_str().is_empty() {
            return Err(Invalid::new("binary", "is empty".into()));
        }
        Ok(())
    }
}
