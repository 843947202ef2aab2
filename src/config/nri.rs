//! `[containerd] memlock_via` and the NRI plugin's settings: how containers
//! get RLIMIT_MEMLOCK (containerd's base spec, the agent's NRI plugin, or both).

use serde::{Deserialize, Deserializer};

/// The annotation that asks for the target memlock without an RDMA device.
pub const ANNOTATION: &str = "memlock.rdma-node-agent.io/nri";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemlockVia {
    /// The base OCI spec of every CRI handler (a containerd restart, every container).
    BaseSpec,
    /// The agent's NRI plugin: only containers with RDMA devices, no restart.
    Nri,
    /// Both: the base spec for every container, NRI for new RDMA containers meanwhile.
    Both,
    /// NRI when the running containerd accepts NRI plugins, else the base spec.
    Auto,
}

impl MemlockVia {
    pub fn as_str(self) -> &'static str {
        match self {
            MemlockVia::BaseSpec => "base-spec",
            MemlockVia::Nri => "nri",
            MemlockVia::Both => "both",
            MemlockVia::Auto => "auto",
        }
    }

    /// Whether the daemon runs the NRI plugin (`auto`: when the socket answers).
    pub fn may_use_nri(self) -> bool {
        self != MemlockVia::BaseSpec
    }

    /// The base-spec route, given whether the running containerd's NRI socket
    /// accepts plugins (only asked for `auto`).
    pub fn base_spec(self, nri_available: impl FnOnce() -> bool) -> bool {
        match self {
            MemlockVia::BaseSpec | MemlockVia::Both => true,
            MemlockVia::Nri => false,
            MemlockVia::Auto => !nri_available(),
        }
    }
}

impl super::ContainerdConfig {
    /// Whether this cycle takes the base-spec route (and containerd's own
    /// LimitMEMLOCK): `auto` asks whether the running containerd takes NRI
    /// plugins (the daemon's plugin registered, or its socket listening).
    pub fn base_spec_route(&self, snap: &crate::host::snapshot::Snapshot) -> bool {
        self.memlock_via.base_spec(|| {
            // Once registered in this daemon, a containerd restart (socket
            // briefly gone) does not flip `auto` to a base spec and a restart.
            snap.nri()
                .is_some_and(|p| p.registered || p.registrations > 0)
                || crate::host::nri::probe(snap, &self.nri_socket).is_ok()
        })
    }
}

impl<'de> Deserialize<'de> for MemlockVia {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "base-spec" => MemlockVia::BaseSpec,
            "nri" => MemlockVia::Nri,
            "both" => MemlockVia::Both,
            "auto" => MemlockVia::Auto,
            other => {
                return Err(serde::de::Error::custom(format!(
                    "memlock_via = {other:?}: use \"base-spec\" (containerd's base spec, every container, a restart), \"nri\" (the agent's NRI plugin, RDMA containers only, no restart), \"both\" or \"auto\" (NRI when the running containerd accepts NRI plugins)"
                )));
            }
        })
    }
}

/// Two digits, as NRI's CheckPluginIndex wants (pkg/api/plugin.go).
pub fn index(d: &str) -> Result<String, String> {
    if d.len() == 2 && d.bytes().all(|b| b.is_ascii_digit()) {
        Ok(d.to_owned())
    } else {
        Err(format!(
            "nri_index = {d:?}: NRI wants two digits (\"00\" to \"99\"), the plugin's place among containerd's plugins"
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::concerns::registry::SECTIONS;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn modes_parse_and_bad_ones_say_what_is_allowed() {
        let c = Config::parse(
            "[containerd]\nmemlock_via = \"nri\"\n",
            Path::new("c.toml"),
            SECTIONS,
        )
        .unwrap();
        assert_eq!(c.containerd.memlock_via, super::MemlockVia::Nri);
        assert_eq!(
            Config::default().containerd.memlock_via,
            super::MemlockVia::BaseSpec
        );
        let e = Config::parse(
            "[containerd]\nmemlock_via = \"ulimit\"\n",
            Path::new("c.toml"),
            SECTIONS,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("c.toml:2:") && e.contains("\"base-spec\""),
            "{e}"
        );
        let e = Config::parse(
            "[containerd]\nnri_index = \"7\"\n",
            Path::new("c.toml"),
            SECTIONS,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("two digits"), "{e}");
    }

    #[test]
    fn auto_uses_the_base_spec_only_without_nri() {
        use super::MemlockVia::*;
        assert!(Auto.base_spec(|| false));
        assert!(!Auto.base_spec(|| true));
        assert!(!Nri.base_spec(|| unreachable!()));
        assert!(Both.base_spec(|| unreachable!()));
    }
}
