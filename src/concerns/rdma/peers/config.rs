//! The `[peers]` section: peer probes between nodes (issue 35). Off by
//! default: probing needs the probe helper, a fleet key on every node and a
//! peer source. Everything it sets is on docs/peers.md; the keys are
//! documented in etc/rdma-node-agent/config.toml. Self-contained: the section
//! owns its types, defaults and checks, so it moves with its concern.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::config::rdma::parse_window;
use crate::config::section::{Invalid, Section, absolute};
use crate::host::probe::settings::ProberSettings;
use crate::host::probe::sources::MAX_RAIL;

/// The responder's RDMA-CM service port (RDMA_PS_TCP) when none is set.
pub const DEFAULT_PORT: u16 = 18770;
/// Peers probed per port and round, at most: the matrix's cardinality and the
/// probe traffic grow with it.
pub const MAX_K: u32 = 16;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeersConfig {
    /// Probe peers and judge the results (`rdma.peers`) at all.
    pub enabled: bool,
    /// The fleet key (at least 32 bytes, root-only): probes are signed with it
    /// and the responder refuses any that are not.
    pub key_file: PathBuf,
    /// The responder's RDMA-CM service port (RDMA_PS_TCP), the same fleet-wide.
    pub port: u16,
    /// Peers probed per ACTIVE port and round.
    pub k: u32,
    /// How often a round runs (`"60s"`, `"5m"`), in seconds.
    #[serde(rename = "interval", deserialize_with = "duration")]
    pub interval_secs: u64,
    /// How long one probe may take, connection to echo (`"2s"`), in seconds.
    #[serde(rename = "probe_timeout", deserialize_with = "duration")]
    pub probe_timeout_secs: u64,
    /// Probe only peers on the same rail index as the local port.
    pub same_rail: bool,
    /// Each local port's rail index, by RDMA device (`mlx5_0`) or netdev
    /// (`ens1f0np0`); a port named in neither has no rail (never `rail_mismatch`).
    pub rails: BTreeMap<String, u32>,
    /// Where the peers come from.
    pub source: PeerSource,
    /// This node's name as the peer source writes it (its Kubernetes node
    /// name); empty: the hostname. Its responders serve, and its ports probe
    /// from, only the addresses the source lists under this name, so several
    /// agents on one host never contend for an address.
    pub node: String,
    /// The return-to-service gate: after a boot, a kernel or driver change or
    /// `rdma-node-agent gate reset`, the node is not ready for RDMA jobs until
    /// its selftest and a round of peer probes pass.
    pub gate: bool,
}

/// A peer source: the operator's own list, or the fleet's Prometheus.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum PeerSource {
    /// A TOML file of `[[peer]] node, addr, fabric, rail` (the Ansible role templates it).
    File { path: PathBuf },
    /// The agents' own `port_info` / `peer_addr_info` series in Prometheus.
    Prometheus {
        url: String,
        /// The instant query whose series name the peers; empty: the built-in one.
        #[serde(default)]
        query: String,
        /// A bearer token, read from a root-only file.
        #[serde(default)]
        bearer_token_file: Option<PathBuf>,
    },
}

pub const DEFAULT_PEERS_FILE: &str = "/etc/rdma-node-agent/peers.toml";

impl Default for PeerSource {
    fn default() -> Self {
        PeerSource::File {
            path: DEFAULT_PEERS_FILE.into(),
        }
    }
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_window(&text)
        .map_err(|_| {
            format!("{text:?} is not a duration: a whole number with s, m, h or d (\"60s\")")
        })
        .map_err(serde::de::Error::custom)
}

impl Default for PeersConfig {
    fn default() -> Self {
        PeersConfig {
            enabled: false,
            key_file: "/etc/rdma-node-agent/peers.key".into(),
            port: DEFAULT_PORT,
            k: 3,
            interval_secs: 60,
            probe_timeout_secs: 2,
            same_rail: false,
            rails: BTreeMap::new(),
            source: PeerSource::default(),
            node: String::new(),
            gate: false,
        }
    }
}

impl PeersConfig {
    /// A port's rail: by its device name first, then its netdev.
    pub fn rail(&self, device: &str, netdev: Option<&str>) -> Option<u32> {
        self.rails
            .get(device)
            .or_else(|| netdev.and_then(|n| self.rails.get(n)))
            .copied()
    }

    /// The prober's settings (`host::probe::settings`), from this section.
    pub fn settings(&self) -> ProberSettings {
        ProberSettings {
            enabled: self.enabled,
            key_file: self.key_file.clone(),
            port: self.port,
            k: self.k as usize,
            interval: Duration::from_secs(self.interval_secs),
            probe_timeout: Duration::from_secs(self.probe_timeout_secs),
            same_rail: self.same_rail,
            serve_unlisted: matches!(self.source, PeerSource::Prometheus { .. }),
            ..ProberSettings::default()
        }
    }

    /// How old the newest round may be before it proves nothing: three intervals.
    pub fn stale_after_secs(&self) -> u64 {
        self.interval_secs.saturating_mul(3)
    }
}

impl Section for PeersConfig {
    const NAME: &'static str = "peers";
    fn validate(&self) -> Result<(), Invalid> {
        absolute("key_file", &self.key_file)?;
        self.validate_rounds()?;
        self.validate_names()?;
        self.validate_source()
    }
}

impl PeersConfig {
    /// The service port, and rounds that fit their interval.
    fn validate_rounds(&self) -> Result<(), Invalid> {
        if self.port == 0 {
            return Err(Invalid::new(
                "port",
                "0 is no service port: the default is 18770".into(),
            ));
        }
        if self.k == 0 || self.k > MAX_K {
            return Err(Invalid::new(
                "k",
                format!(
                    "{} is outside 1..={MAX_K}: one peer cannot tell a bad peer from a bad port (3 is the default), and more than {MAX_K} only adds traffic and series",
                    self.k
                ),
            ));
        }
        if self.interval_secs < 10 {
            return Err(Invalid::new(
                "interval",
                format!(
                    "{}s is shorter than 10s: probe traffic would exceed its budget (docs/peers.md \"Cost\"); use \"60s\"",
                    self.interval_secs
                ),
            ));
        }
        // A round probes k peers one after another per port: it must end
        // before the next starts.
        let round = self.probe_timeout_secs.saturating_mul(u64::from(self.k));
        if self.probe_timeout_secs == 0 || round >= self.interval_secs {
            return Err(Invalid::new(
                "probe_timeout",
                format!(
                    "{}s × k = {} is not shorter than interval = {}s: a round of timed-out probes would overlap the next",
                    self.probe_timeout_secs, self.k, self.interval_secs
                ),
            ));
        }
        Ok(())
    }

    /// This node's name and the rails of its ports.
    fn validate_names(&self) -> Result<(), Invalid> {
        if self.node.len() > 253 || self.node.contains(char::is_whitespace) {
            return Err(Invalid::new(
                "node",
                format!(
                    "{:?} is not a node name: the peer source's name for this node (empty: the hostname)",
                    self.node
                ),
            ));
        }
        if let Some((name, rail)) = self
            .rails
            .iter()
            .find(|(n, r)| n.is_empty() || n.contains(['/', ' ']) || **r > MAX_RAIL)
        {
            return Err(Invalid::new(
                "rails",
                format!(
                    "{name:?} = {rail}: a key is an RDMA device or netdev name (mlx5_0, ens1f0np0) and a rail 0..={MAX_RAIL}"
                ),
            ));
        }
        if self.same_rail && self.enabled && self.rails.is_empty() {
            return Err(Invalid::new(
                "same_rail",
                "true, but [peers.rails] names no port's rail: no peer could be chosen".into(),
            ));
        }
        Ok(())
    }

    /// Where the peer list is read from.
    fn validate_source(&self) -> Result<(), Invalid> {
        match &self.source {
            PeerSource::File { path } => absolute("source", path),
            PeerSource::Prometheus {
                url,
                bearer_token_file,
                ..
            } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(Invalid::new(
                        "source",
                        format!("url {url:?} is not an http:// or https:// URL of Prometheus"),
                    ));
                }
                if let Some(p) = bearer_token_file {
                    absolute("source", p)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concerns::registry::SECTIONS;
    use crate::config::Config;
    use std::path::Path;

    fn err(text: &str) -> String {
        Config::parse(text, Path::new("c.toml"), SECTIONS)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn off_by_default_and_a_full_section_parses() {
        let c = Config::parse("", Path::new("c.toml"), SECTIONS).unwrap();
        assert!(!c.section::<PeersConfig>().enabled && !c.section::<PeersConfig>().gate);
        assert_eq!(c.section::<PeersConfig>().port, 18770);
        let c = Config::parse(
            r#"
[peers]
enabled = true
k = 4
interval = "2m"
probe_timeout = "3s"
same_rail = true
gate = true
[peers.rails]
mlx5_0 = 0
ens2f0np0 = 1
[peers.source]
kind = "prometheus"
url = "https://prometheus.example:9090"
"#,
            Path::new("c.toml"),
            SECTIONS,
        )
        .unwrap();
        let p = c.section::<PeersConfig>();
        assert_eq!((p.k, p.interval_secs, p.probe_timeout_secs), (4, 120, 3));
        assert_eq!(p.rail("mlx5_0", Some("ens1f0np0")), Some(0));
        assert_eq!(p.rail("mlx5_1", Some("ens2f0np0")), Some(1));
        assert_eq!(p.rail("mlx5_2", None), None);
        assert!(matches!(&p.source, PeerSource::Prometheus { query, .. } if query.is_empty()));
        assert_eq!(p.stale_after_secs(), 360);
        assert!(p.node.is_empty(), "empty: the hostname");
        let s = p.settings();
        assert_eq!((s.k, s.port, s.same_rail), (4, 18770, true));
        assert!(s.serve_unlisted, "Prometheus lists running responders only");
        assert!(!PeersConfig::default().settings().serve_unlisted);
        assert_eq!(s.interval, Duration::from_secs(120));
        assert_eq!(s.probe_timeout, Duration::from_secs(3));
        assert_eq!(
            s.helper,
            ProberSettings::default().helper,
            "the installed helper"
        );
    }

    #[test]
    fn values_it_cannot_use_are_refused_naming_the_key() {
        let cases = [
            (
                "[peers]\nk = 0\n",
                "c.toml:2:1: k under [peers]: 0 is outside",
            ),
            ("[peers]\nk = 17\n", "c.toml:2:1: k under [peers]"),
            ("[peers]\nport = 0\n", "c.toml:2:1: port under [peers]"),
            (
                "[peers]\nnode = \"gpu 1\"\n",
                "c.toml:2:1: node under [peers]: \"gpu 1\" is not a node name",
            ),
            (
                "[peers]\ninterval = \"5s\"\n",
                "c.toml:2:1: interval under [peers]",
            ),
            (
                "[peers]\ninterval = \"10s\"\nprobe_timeout = \"4s\"\n",
                "c.toml:3:1: probe_timeout under [peers]: 4s × k = 3 is not shorter",
            ),
            (
                "[peers]\nkey_file = \"peers.key\"\n",
                "c.toml:2:1: key_file under [peers]",
            ),
            (
                "[peers]\nenabled = true\nsame_rail = true\n",
                "c.toml:3:1: same_rail under [peers]",
            ),
            (
                "[peers.rails]\nmlx5_0 = 64\n",
                "c.toml:1:1: rails under [peers]",
            ),
            (
                "[peers.source]\nkind = \"prometheus\"\nurl = \"prom:9090\"\n",
                "c.toml:1:1: source under [peers]: url \"prom:9090\"",
            ),
            (
                "[peers.source]\nkind = \"file\"\npath = \"peers.toml\"\n",
                "source under [peers]",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(e.starts_with(want) || e.contains(want), "{text:?}: {e}");
        }
        // Wrong types and unknown keys are refused by the parser, located.
        assert!(err("[peers]\ninterval = \"soon\"\n").contains("not a duration"));
        assert!(err("[peers.source]\nkind = \"dns\"\n").contains("dns"));
        assert!(
            err("[peers.source]\nkind = \"file\"\npath = \"/p\"\nurl = \"x\"\n").contains("url")
        );
    }
}
