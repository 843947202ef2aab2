//! What a fleet compares between nodes, as low-cardinality facts for the info
//! metrics (no check of its own): per RDMA device its firmware, board and
//! driver; per node its kernel, netns mode, memlock target and GPU driver.
//! Read-only, from sysfs, /proc and the config; the netns mode from
//! `rdma.netns`'s observation. Per port, `port_info` renders the one port
//! model `rdma.devices` makes (`Observation::Port`). SR-IOV VFs are left out:
//! they repeat their PF.

use std::path::Path;

use crate::config::Config;
use crate::config::nri::MemlockVia;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::Fact;
use crate::host::inventory::{Device, trimmed};
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, Observations};
use crate::reason::Reason;

pub struct Facts {
    devices: Vec<Fact>,
    kernel: String,
    gpu_driver: String,
    /// The route containers get memlock by this cycle: `auto` resolved.
    memlock_via: &'static str,
}

pub struct Export;

impl Concern for Export {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    fn ids(&self) -> &'static [CheckId] {
        &[]
    }

    /// Read-only and cheap: exported whatever the checks' settings.
    fn enabled(&self, _cfg: &Config) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        let host = snap;
        let inventory = snap.rdma_inventory().map_err(GatherError::unknown)?;
        // SR-IOV VFs share their PF's firmware and board: a node with a
        // thousand of them would export a thousand series saying so.
        let devices = inventory.physical().map(|d| device(host, d)).collect();
        Ok(Facts {
            devices,
            kernel: snap.kernel_release().unwrap_or_default(),
            gpu_driver: host.text_or_empty(Path::new("/sys/module/nvidia/version")),
            memlock_via: memlock_via(cfg, snap),
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let node = Fact::Node {
            kernel: f.kernel.clone(),
            netns_mode: ctx
                .observations
                .netns_mode()
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default(),
            memlock_target: ctx.config.containerd.memlock.to_string(),
            memlock_via: f.memlock_via.to_owned(),
            gpu_driver: f.gpu_driver.clone(),
        };
        let observations = f
            .devices
            .iter()
            .cloned()
            .chain([node])
            .map(Observation::Fleet)
            .collect();
        Decision {
            observations,
            ..Decision::default()
        }
    }
}

/// A device's firmware, board, driver (with its OFED module version) and GUID.
fn device(host: &Snapshot, dev: &Device) -> Fact {
    let driver = dev.driver.clone().unwrap_or_default();
    // MLNX_OFED and DOCA-OFED modules carry a version; in-tree ones do not.
    let version = host.text_or_empty(&Path::new("/sys/module").join(&driver).join("version"));
    Fact::Device {
        device: dev.name.clone(),
        fw_ver: trimmed(&dev.fw_ver),
        board_id: trimmed(&dev.board_id),
        driver: if driver.is_empty() || version.is_empty() {
            driver
        } else {
            format!("{driver} {version}")
        },
        node_guid: trimmed(&dev.node_guid),
    }
}

/// How containers get their memlock here, as `[containerd] memlock_via`
/// spells it, with `auto` resolved as `containerd.memlock` resolves it this
/// cycle; empty when the agent does not prepare containerd.
fn memlock_via(cfg: &Config, snap: &Snapshot) -> &'static str {
    let via = cfg.containerd.memlock_via;
    match via {
        _ if !cfg.containerd.enabled => "",
        MemlockVia::Auto if cfg.containerd.base_spec_route(snap) => MemlockVia::BaseSpec.as_str(),
        MemlockVia::Auto => MemlockVia::Nri.as_str(),
        _ => via.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `node_info{memlock_via}` is the route this cycle takes: before, it
    /// said "base-spec" whatever the config.
    #[test]
    fn memlock_via_is_the_route_taken() {
        let t = tempfile::tempdir().unwrap();
        let snap = Snapshot::new(crate::host::Host::new(t.path()));
        let via = |text: &str| {
            let cfg = Config::parse(
                text,
                Path::new("c.toml"),
                crate::concerns::registry::SECTIONS,
            )
            .unwrap();
            memlock_via(&cfg, &snap)
        };
        assert_eq!(via(""), "base-spec");
        assert_eq!(via("[containerd]\nmemlock_via = \"nri\"\n"), "nri");
        assert_eq!(via("[containerd]\nmemlock_via = \"both\"\n"), "both");
        // `auto` with no NRI socket to take plugins: the base spec.
        assert_eq!(via("[containerd]\nmemlock_via = \"auto\"\n"), "base-spec");
        assert_eq!(
            via("[containerd]\nenabled = false\nmemlock_via = \"nri\"\n"),
            ""
        );
    }
}
