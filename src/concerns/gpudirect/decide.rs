//! The pure decision of `gpudirect.path`: pair each GPU with its nearest
//! NIC(s), walk the path between them (ACS on every bridge, every link's speed
//! and width against what both ends can do), say how GPU memory would be
//! registered, and turn that into one check with a line a person can act on.

use crate::concerns::gpudirect::reasons;
use std::collections::BTreeMap;

use serde::Serialize;

use super::gather::{Endpoint, Facts, Function};
use super::mechanism::{self, Kind, Mechanism};
use super::pcie::{self, Acs, ConfigSpace, PortType};
use super::topo::{self, Distance};

/// Why a pair is not ready, as the `reason` label of the metrics (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// An ACS redirect or egress-control bit on a bridge of the path.
    AcsRedirect,
    /// A bridge's ACS could not be read (config space unreadable or truncated).
    AcsUnknown,
    /// A link on the path trained below what both its ends support.
    LinkDegraded,
    /// Through the host bridge or further: NCCL does not use GPUDirect RDMA there by default.
    Distance,
    /// Neither peermem nor DMA-BUF.
    NoMechanism,
    /// Whether DMA-BUF works could not be told (driver version or kernel config unreadable).
    MechanismUnknown,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::AcsRedirect,
        Reason::AcsUnknown,
        Reason::LinkDegraded,
        Reason::Distance,
        Reason::NoMechanism,
        Reason::MechanismUnknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::AcsRedirect => "acs_redirect",
            Reason::AcsUnknown => "acs_unknown",
            Reason::LinkDegraded => "link_degraded",
            Reason::Distance => "distance",
            Reason::NoMechanism => "no_mechanism",
            Reason::MechanismUnknown => "mechanism_unknown",
        }
    }

    /// The check's reason code for this pair reason (docs/reasons.md).
    pub fn code(self) -> crate::reason::Reason {
        use crate::reason::Reason as R;
        match self {
            Reason::AcsRedirect => reasons::ACS_REDIRECT,
            Reason::LinkDegraded => reasons::PCIE_LINK_DEGRADED,
            Reason::Distance => reasons::GPU_NIC_DISTANCE,
            Reason::NoMechanism => reasons::GPUDIRECT_NO_MECHANISM,
            Reason::AcsUnknown | Reason::MechanismUnknown => R::FACT_UNREADABLE,
        }
    }

    /// Reasons that leave readiness open rather than settle it.
    pub fn is_unknown(self) -> bool {
        matches!(self, Reason::AcsUnknown | Reason::MechanismUnknown)
    }

    /// Reasons that slow GPUDirect down without keeping it from working.
    fn is_degradation(self) -> bool {
        matches!(self, Reason::LinkDegraded)
    }
}

/// One link on a path, named by the function below it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hop {
    pub device: String,
    /// Tenths of GT/s.
    pub speed: Option<u32>,
    /// What both ends support: the lower of the two maxima.
    pub max_speed: Option<u32>,
    pub width: Option<u32>,
    pub max_width: Option<u32>,
}

impl Hop {
    fn speed_low(&self) -> bool {
        matches!((self.speed, self.max_speed), (Some(c), Some(m)) if c < m)
    }
    fn width_low(&self) -> bool {
        matches!((self.width, self.max_width), (Some(c), Some(m)) if c < m)
    }
    fn text(s: Option<u32>, w: Option<u32>) -> String {
        let s = s.map_or("unknown speed".to_owned(), pcie::speed_text);
        let w = w.map_or("unknown width".to_owned(), |w| format!("x{w}"));
        format!("{s} {w}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pair {
    pub gpu: String,
    pub nic: String,
    pub nic_pci: String,
    pub distance: Distance,
    pub bridges: Vec<String>,
    pub hops: Vec<Hop>,
    pub mechanism: Kind,
    pub iommu: &'static str,
    pub reasons: Vec<Reason>,
    /// `Some(true)`: GPUDirect RDMA can work at full speed; `None`: cannot tell.
    pub ready: Option<bool>,
    /// One line per problem, each saying what to do.
    pub problems: Vec<String>,
}

impl Pair {
    /// The pair in one line: where it is, how GPU memory would be registered,
    /// and what keeps it from GPUDirect RDMA (the reason codes of the metrics).
    pub fn line(&self) -> String {
        let via = if self.bridges.is_empty() {
            "no bridge between".to_owned()
        } else {
            format!("via {}", self.bridges.join(" → "))
        };
        let reasons: Vec<&str> = self.reasons.iter().map(|r| r.as_str()).collect();
        let reasons = reasons.join(", ");
        let state = match self.ready {
            Some(true) if self.reasons.is_empty() => "ready".to_owned(),
            Some(true) => format!("ready, slowed: {reasons}"),
            Some(false) => format!("not ready: {reasons}"),
            None => format!("cannot tell: {reasons}"),
        };
        format!(
            "GPU {} ↔ {} ({}): {} {via}; mechanism {}; IOMMU {}; {state}",
            self.gpu,
            self.nic,
            self.nic_pci,
            self.distance.as_str(),
            self.mechanism.as_str(),
            self.iommu,
        )
    }
}

/// The facts read, each function's configuration space parsed once.
pub struct View<'f> {
    pub facts: &'f Facts,
    config: BTreeMap<&'f str, Result<ConfigSpace, String>>,
}

impl<'f> View<'f> {
    pub fn new(facts: &'f Facts) -> Self {
        let config = facts
            .functions
            .iter()
            .map(|(bdf, f)| {
                let c = match &f.config {
                    Ok(Some(bytes)) => Ok(pcie::parse_config(bytes)),
                    Ok(None) => Err("no config file".to_owned()),
                    Err(e) => Err(e.clone()),
                };
                (bdf.as_str(), c)
            })
            .collect();
        View { facts, config }
    }

    /// A function's ACS, when its configuration space was read.
    pub fn acs(&self, bdf: &str) -> Option<Acs> {
        Some(self.config.get(bdf)?.as_ref().ok()?.acs)
    }

    pub fn port(&self, bdf: &str) -> Option<PortType> {
        self.config.get(bdf)?.as_ref().ok()?.port
    }

    pub fn identity(&self, bdf: &str) -> Option<crate::host::pci_config::PciIdentity> {
        self.config.get(bdf)?.as_ref().ok()?.identity
    }

    pub fn function(&self, bdf: &str) -> Option<&'f Function> {
        self.facts.functions.get(bdf)
    }
}

fn attr_num(a: &super::gather::Attr, parse: fn(&str) -> Option<u32>) -> Option<u32> {
    a.as_ref().ok()?.as_deref().and_then(parse)
}

fn hop(view: &View, device: &str, parent: Option<&str>) -> Hop {
    let f = view.function(device);
    let p = parent.and_then(|p| view.function(p));
    let own =
        |get: fn(&Function) -> &super::gather::Attr, parse| f.and_then(|f| attr_num(get(f), parse));
    let up =
        |get: fn(&Function) -> &super::gather::Attr, parse| p.and_then(|p| attr_num(get(p), parse));
    let lower = |a: Option<u32>, b: Option<u32>, has_parent: bool| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (Some(a), None) if !has_parent => Some(a),
        _ => a,
    };
    Hop {
        device: device.to_owned(),
        speed: own(|f| &f.current_link_speed, pcie::parse_speed),
        max_speed: lower(
            own(|f| &f.max_link_speed, pcie::parse_speed),
            up(|f| &f.max_link_speed, pcie::parse_speed),
            p.is_some(),
        ),
        width: own(|f| &f.current_link_width, pcie::parse_width),
        max_width: lower(
            own(|f| &f.max_link_width, pcie::parse_width),
            up(|f| &f.max_link_width, pcie::parse_width),
            p.is_some(),
        ),
    }
}

/// IOMMU mode of a pair: from the devices' groups (`DMA`/`DMA-FQ` translate,
/// `identity` passes through, no group: not behind an IOMMU).
fn iommu_mode(a: &Endpoint, b: &Endpoint) -> &'static str {
    let kinds = [a.iommu.as_deref(), b.iommu.as_deref()];
    if kinds
        .iter()
        .any(|k| matches!(k, Some(t) if t.starts_with("DMA")))
    {
        "translated"
    } else if kinds.contains(&Some("identity")) {
        "passthrough"
    } else {
        "off"
    }
}

/// The node's IOMMU as the kernel was told to run it (for the summary).
pub fn node_iommu(f: &Facts) -> &'static str {
    if f.iommu_units == 0 {
        return "off";
    }
    let cmd = f.cmdline.as_deref().unwrap_or("");
    let has = |w: &str| cmd.split_whitespace().any(|t| t == w);
    if has("iommu=pt") || has("iommu.passthrough=1") {
        return "passthrough";
    }
    if has("iommu.passthrough=0") {
        return "translated";
    }
    match &f.mechanism.kconfig {
        mechanism::KernelConfig::Read { text, .. }
            if mechanism::kconfig(text, "CONFIG_IOMMU_DEFAULT_PASSTHROUGH") == Some("y") =>
        {
            "passthrough"
        }
        _ => "translated",
    }
}

fn pair(
    view: &View,
    gpu: &Endpoint,
    nic: &super::gather::Nic,
    route: topo::Route,
    mech: &Mechanism,
) -> Pair {
    let who = format!("GPU {} ↔ {}", gpu.pci, nic.name);
    let mut reasons = Vec::new();
    let mut problems = Vec::new();
    for br in &route.bridges {
        if let Some((reason, problem)) = acs_problem(view, br, &who) {
            reasons.push(reason);
            problems.push(problem);
        }
    }
    let hops = hops_below_common(view, gpu, nic);
    for h in &hops {
        // NVIDIA GPUs lower their link speed when idle (PCIe power saving):
        // only a narrower link is a fault there; the speed is shown.
        let idle_gpu = h.device == gpu.pci;
        if h.width_low() || (h.speed_low() && !idle_gpu) {
            reasons.push(Reason::LinkDegraded);
            problems.push(format!(
                "{who}: the link of {} runs at {}, both ends support {}: bandwidth is cut; reseat the card or riser, check the slot and the firmware's PCIe settings (lspci -vv -s {})",
                h.device,
                Hop::text(h.speed, h.width),
                Hop::text(h.max_speed, h.max_width),
                h.device
            ));
        }
    }
    // NCCL's default NCCL_NET_GDR_LEVEL is PXB (ncclTopoCheckGdr in
    // src/graph/paths.cc): further away it stages through host memory.
    if route.distance > Distance::Pxb {
        reasons.push(Reason::Distance);
        problems.push(format!(
            "{who}: the nearest NIC is {} away (through the {}): NCCL does not use GPUDirect RDMA beyond PXB by default and stages through host memory; put a NIC under the GPU's PCIe switch",
            route.distance.as_str(),
            match route.distance {
                Distance::Phb => "host bridge",
                Distance::Node => "CPU between host bridges",
                _ => "interconnect between CPU sockets",
            }
        ));
    }
    match (mech.kind, &mech.unknown) {
        (Kind::None, Some(_)) => reasons.push(Reason::MechanismUnknown),
        (Kind::None, None) => reasons.push(Reason::NoMechanism),
        _ => {}
    }
    reasons.sort_unstable();
    reasons.dedup();
    Pair {
        gpu: gpu.pci.clone(),
        nic: nic.name.clone(),
        nic_pci: nic.at.pci.clone(),
        distance: route.distance,
        bridges: route.bridges,
        hops,
        mechanism: mech.kind,
        iommu: iommu_mode(gpu, &nic.at),
        ready: readiness(&reasons),
        reasons,
        problems,
    }
}

/// What a bridge on the path does to peer-to-peer: its ACS redirect, or why
/// its ACS is unknown; `None` when it lets traffic pass.
fn acs_problem(view: &View, br: &str, who: &str) -> Option<(Reason, String)> {
    let noun = view.port(br).map_or("bridge", PortType::noun);
    let acs = match view.config.get(br)? {
        Ok(ConfigSpace { acs, .. }) => acs,
        Err(e) => {
            return Some((
                Reason::AcsUnknown,
                format!("{who}: cannot read the config space of {noun} {br}: {e}"),
            ));
        }
    };
    match *acs {
        Acs::Present { ctl, .. } if acs.blocking() != 0 => Some((
            Reason::AcsRedirect,
            format!(
                "{who}: ACS P2P redirect on {noun} {br} (ACSCtl {}): peer-to-peer goes through the root complex; run 'rdma-node-agent apply' with [gpudirect] acs = \"disable\", or setpci -s {br} ECAP_ACS+6.w=0000 after every boot, or disable ACS in the firmware setup (not where VFIO/VM passthrough relies on ACS isolation)",
                pcie::acs_ctl_text(ctl)
            ),
        )),
        Acs::Truncated { len } => {
            let helper = view
                .function(br)
                .and_then(|f| f.helper.as_deref())
                .map(|e| format!("; the agent's helper could not read it either: {e}"))
                .unwrap_or_default();
            Some((
                Reason::AcsUnknown,
                if len < 256 {
                    format!(
                        "{who}: ACS of {noun} {br} unknown: config space truncated to {len} bytes: the process lacks CAP_SYS_ADMIN (the kernel gives others the first 64 bytes){helper}; run the check as root, or let the daemon reach systemd over D-Bus to run its helper"
                    )
                } else {
                    format!(
                        "{who}: ACS of {noun} {br} unknown: config space truncated to {len} bytes although it is PCI Express: the kernel cannot reach its extended configuration space (pci=nommconf, no ECAM/MMCONFIG, or a hypervisor hiding it); check `lspci -vvv -s {br}` as root"
                    )
                },
            ))
        }
        Acs::NotResponding { at } => Some((
            Reason::AcsUnknown,
            format!(
                "{who}: ACS of {noun} {br} unknown: its config space reads all ones (0xffffffff at 0x{at:03x}): the {noun} does not answer (removed, powered off, or contained by DPC after an error); see `dmesg` for DPC/AER and `lspci -vvv -s {br}`"
            ),
        )),
        _ => None,
    }
}

/// Links below the common ancestor: the ones peer-to-peer traffic crosses.
fn hops_below_common(view: &View, gpu: &Endpoint, nic: &super::gather::Nic) -> Vec<Hop> {
    let common = gpu
        .chain
        .iter()
        .zip(&nic.at.chain)
        .take_while(|(a, b)| a == b)
        .count();
    let mut hops = Vec::new();
    for chain in [&gpu.chain, &nic.at.chain] {
        for (dev, parent) in topo::links(chain, |b| view.port(b)) {
            if chain
                .iter()
                .position(|c| *c == dev)
                .is_some_and(|i| i >= common)
            {
                hops.push(hop(view, &dev, parent.as_deref()));
            }
        }
    }
    hops
}

/// Ready unless a reason is a fault; unknown where a reason is unknown.
fn readiness(reasons: &[Reason]) -> Option<bool> {
    if reasons
        .iter()
        .any(|r| !r.is_unknown() && !r.is_degradation())
    {
        Some(false)
    } else if reasons.iter().any(|r| r.is_unknown()) {
        None
    } else {
        Some(true)
    }
}

/// Every GPU with its nearest NIC(s): all NICs at the smallest distance.
pub fn pairs(view: &View, mech: &Mechanism) -> Vec<Pair> {
    let f = view.facts;
    let mut out = Vec::new();
    for gpu in &f.gpus {
        let routes: Vec<(usize, topo::Route)> = f
            .nics
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let r = topo::route(&gpu.chain, &n.at.chain, (gpu.numa, n.at.numa), |b| {
                    view.port(b)
                });
                (i, r)
            })
            .collect();
        let Some(best) = routes.iter().map(|(_, r)| r.distance).min() else {
            continue;
        };
        for (i, r) in routes.into_iter().filter(|(_, r)| r.distance == best) {
            out.push(pair(view, gpu, &f.nics[i], r, mech));
        }
    }
    out
}
