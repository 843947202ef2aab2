//! The prober's settings, as a plain struct: the `[peers]` config section
//! (config/peers.rs) fills it; the prober and the responders read only this.

use std::path::PathBuf;
use std::time::Duration;

/// Where the package installs the probe helper.
pub const HELPER: &str = "/usr/libexec/rdma-node-agent/rdma-node-agent-probe";
/// The responders' RDMA-CM service port (RDMA_PS_TCP).
pub const DEFAULT_PORT: u16 = 18770;

#[derive(Debug, Clone, PartialEq)]
pub struct ProberSettings {
    pub enabled: bool,
    /// The probe helper (`HELPER` as installed).
    pub helper: PathBuf,
    /// The fleet key: mode 0600, owned by the agent's user (the helper refuses others).
    pub key_file: PathBuf,
    pub port: u16,
    /// Peers each local port probes per round.
    pub k: usize,
    pub interval: Duration,
    /// One probe's budget, both exchanges included; the helper is killed past
    /// it plus `HELPER_GRACE`.
    pub probe_timeout: Duration,
    /// Probe only peers of the same rail (when both rails are known).
    pub same_rail: bool,
    /// Probes run at once in a round.
    pub parallel: usize,
    /// Responder: connection requests per second, total (a quarter per sender).
    pub rate: u32,
    /// Run responders on local ports the peer list does not name (yet): a
    /// source built from running responders (Prometheus) lists none before.
    /// Off, only the ports listed under this node's name respond, so several
    /// agents on one host never contend for an address.
    pub serve_unlisted: bool,
}

/// Past the probe's own timeout, how long the helper has to print its line.
pub const HELPER_GRACE: Duration = Duration::from_secs(2);

impl Default for ProberSettings {
    fn default() -> Self {
        ProberSettings {
            enabled: false,
            helper: PathBuf::from(HELPER),
            key_file: PathBuf::from("/etc/rdma-node-agent/peers.key"),
            port: DEFAULT_PORT,
            k: 3,
            interval: Duration::from_secs(60),
            probe_timeout: Duration::from_secs(3),
            same_rail: false,
            parallel: 4,
            rate: 20,
            serve_unlisted: false,
        }
    }
}
