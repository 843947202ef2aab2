//! `rdma.devices` and `rdma.netns` as concerns.

use super::{devices, gpudirect, netns};
use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError, Provides};
use crate::host::netlink::NetnsMode;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, ObservationKind, Port};
use crate::reason::Reason;

pub struct Devices;

pub struct DeviceFacts {
    devices: Vec<devices::Device>,
    ports: Vec<Port>,
    gpu: gpudirect::Facts,
}

impl Concern for Devices {
    type Facts = DeviceFacts;

    fn reasons(&self) -> &'static [Reason] {
        super::devices::reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[devices::CHECK_ID]
    }

    /// Every port, typed (`kubelet.devices` reads them).
    fn provides(&self) -> &'static [Provides] {
        const PROVIDES: &[Provides] = &[Provides::new(ObservationKind::Port, devices::CHECK_ID)];
        PROVIDES
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.rdma.enabled
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<DeviceFacts, GatherError> {
        let devices = devices::gather(snap).map_err(GatherError::unknown)?;
        let ports = devices::ports::gather(snap).map_err(GatherError::unknown)?;
        let gpu = gpudirect::gather(snap).map_err(GatherError::unknown)?;
        Ok(DeviceFacts {
            devices,
            ports,
            gpu,
        })
    }

    fn decide(&self, f: &DeviceFacts, ctx: &Ctx) -> Decision {
        let cfg = &ctx.config.rdma;
        let gpu = gpudirect::decide(&f.gpu, &ctx.config.gpudirect.required_modules);
        let observations = f.ports.iter().cloned().map(Observation::Port).collect();
        Decision {
            checks: vec![devices::check(&f.devices, cfg, &gpu)],
            observations,
            ..Decision::default()
        }
    }
}

pub struct Netns;

impl Concern for Netns {
    type Facts = netns::Facts;

    fn reasons(&self) -> &'static [Reason] {
        super::netns::reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[netns::CHECK_ID]
    }

    /// A reboot the mode switch needs (the reboot sentinel reads it).
    fn provides(&self) -> &'static [Provides] {
        const PROVIDES: &[Provides] = &[Provides::new(
            ObservationKind::RebootRequired,
            netns::CHECK_ID,
        )];
        PROVIDES
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.rdma.enabled
    }

    fn writes(&self) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<netns::Facts, GatherError> {
        netns::gather(snap, &cfg.rdma).map_err(GatherError::unknown)
    }

    fn decide(&self, f: &netns::Facts, ctx: &Ctx) -> Decision {
        let d = netns::decide(f, &ctx.config.rdma);
        let live: Option<NetnsMode> = match f.live {
            netns::Live::Mode(m) => Some(m),
            _ => None,
        };
        let mut observations = vec![Observation::NetnsMode(live)];
        observations.extend(d.reboot_reason.map(Observation::RebootRequired));
        Decision {
            checks: vec![d.check],
            observations,
            changes: d.plan.changes,
            actions: d.plan.actions,
            notes: d.plan.notes,
            ..Decision::default()
        }
    }
}
