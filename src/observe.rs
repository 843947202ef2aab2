//! Typed observations: what the concerns found that other parts of the agent
//! act on or export (later concerns, metrics, NFD labels, the reboot sentinel).
//! Outputs read these values; nothing re-parses a check's JSON details.
//!
//! A new concern keeps its observations in its own folder, as its own type
//! wrapped in `Observation::Own`, and its `metrics.rs` reads them back with
//! `owned::<T>`: nothing here changes. The variants below are shared by
//! several readers (the daemon, NFD, the reboot sentinel) or predate that.

use std::any::{Any, TypeId};
use std::fmt::{self, Debug};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::fleet::Fabric;
use crate::host::inventory::port::LinkLayer;
use crate::host::netlink::NetnsMode;

#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// The running containerd and whether it has read the current config.
    Containerd {
        /// When the containerd that has read the current files started; `None`
        /// when it is not running, its start is unknown, or a restart is owed.
        current_since: Option<SystemTime>,
        grpc_address: PathBuf,
    },
    /// The RLIMIT_MEMLOCK a CRI handler's base spec sets (`None`: none, or no
    /// base spec), as containerd's own view names the handlers; the NRI plugin
    /// reads it because containerd (2.1) does not show plugins a spec's rlimits.
    BaseSpecMemlock {
        handler: String,
        /// containerd's default handler (pods that name none use it).
        default: bool,
        memlock: Option<(u64, u64)>,
    },
    /// The daemon's NRI plugin: registered now, and its counts since start.
    Nri {
        registered: bool,
        adjusted: u64,
        kept_lower: u64,
    },
    /// One RDMA port (`rdma.devices` makes one per port of the inventory).
    Port(Port),
    /// The RDMA subsystem's live netns mode (`None`: ib_core not loaded or unreadable).
    NetnsMode(Option<NetnsMode>),
    /// Only a reboot can apply what the agent set.
    RebootRequired(String),
    /// A reboot now would break RDMA (e.g. a newer kernel without its DKMS builds).
    RebootHeldBack(String),
    /// The kernel changed since the last recorded run.
    KernelChanged { from: String, to: String },
    /// A running pod container with RDMA devices, and what keeps it from
    /// registering memory (none: it can).
    RdmaContainer {
        pod_uid: Option<String>,
        container_id: Option<String>,
        problems: Vec<RdmaProblem>,
    },
    /// How GPU memory is registered with RDMA NICs on this node (`peermem`,
    /// `dmabuf`, `none`); `None`: it could not be told. Only with GPUs.
    GpuDirectMechanism(Option<&'static str>),
    /// One GPU and its nearest NIC (`gpudirect.path`).
    GpuDirectPair {
        gpu: String,
        nic: String,
        mechanism: &'static str,
        distance: &'static str,
        /// `None`: cannot tell.
        ready: Option<bool>,
        /// Codes from `gpudirect::decide::Reason::ALL`, each once, in that order.
        reasons: Vec<&'static str>,
    },
    /// A PCIe link on a GPU↔NIC path, named by the function below it; speeds in
    /// tenths of GT/s, the maxima what both ends support. `None`: unreadable.
    PcieLink {
        device: String,
        speed_tenths_gts: Option<u32>,
        max_speed_tenths_gts: Option<u32>,
        width: Option<u32>,
        max_width: Option<u32>,
    },
    /// A PCIe function `pcie.aer` watches (a NIC's, a GPU's, a bridge above
    /// them): its AER totals since boot, correctable, non-fatal, fatal (`None`:
    /// no AER statistics, or unreadable), and whether its link retrained down.
    PcieAer {
        function: String,
        totals: Option<[u64; 3]>,
        retrained_down: bool,
    },
    /// One RDMA port's error counters of one class (`rdma.counters`): what
    /// rose since the agent's first baseline (across resets and reboots), and
    /// the rate over the configured window (`None`: no baseline yet).
    PortErrors {
        device: String,
        port: String,
        class: &'static str,
        total: u64,
        per_second: Option<f64>,
    },
    /// Fleet comparison facts, link history, and state to keep (`crate::fleet`).
    Fleet(crate::fleet::Fact),
    /// A device-plugin resource the kubelet has registered, with its healthy devices.
    KubeletResource {
        name: String,
        devices: usize,
        rdma: bool,
    },
    /// `driver.health`: the reporters it watched, and each problem it found:
    /// `(device, source, kind, count)` where source is a devlink reporter
    /// (`pci/0000:03:00.0/fw_fatal`) or a kernel-log pattern (`cmd_timeout`)
    /// and kind `reporter_error`, `reporter_errors` or `kernel_log`.
    DriverHealth {
        /// `None`: devlink was not read (not the running kernel, or an error).
        reporters: Option<u64>,
        kernel_log_read: Option<bool>,
        problems: Vec<(String, String, &'static str, u64)>,
    },
    /// A concern's own observation type, declared in its folder.
    Own(Own),
}

/// One RDMA port as the cycle's inventory shows it: the one port model,
/// made once per cycle by `rdma.devices` and read by every consumer (its
/// metrics, `kubelet.devices`, the fleet's `port_info`). `None` fields are
/// unknown (unreadable, or a value the kernel does not name): never to be
/// shown as down; the metrics make them label text.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub device: String,
    pub port: u32,
    /// An SR-IOV VF's port: its link is its PF's share (the fleet skips it).
    pub vf: bool,
    /// ACTIVE, another state the kernel names, or `None`.
    pub active: Option<bool>,
    /// sysfs `rate` in Gb/s (`200`, `2.5`).
    pub rate_gbps: Option<f64>,
    /// The lanes in `rate`'s parenthesis (`4X` → 4).
    pub width: Option<u32>,
    /// `None`: unreadable or odd text (the metrics label it `unknown`).
    pub link_layer: Option<LinkLayer>,
    /// The default GID's netdev, or a software device's parent netdev.
    pub netdev: Option<String>,
    pub netdev_mtu: Option<u32>,
    /// RoCE: the RDMA MTU the kernel derives from the netdev's
    /// (`iboe_get_mtu`); IB: none (only the SM knows).
    pub port_mtu: Option<u32>,
    /// What ports on one fabric share.
    pub fabric: Option<Fabric>,
}

/// What kind an observation is: one per variant of `Observation`, and
/// `Own` per concern-owned type. A concern's `needs()` and `provides()` name
/// kinds, so a misspelt one does not compile.
#[derive(Clone, Copy)]
pub enum ObservationKind {
    Containerd,
    BaseSpecMemlock,
    Nri,
    Port,
    NetnsMode,
    RebootRequired,
    RebootHeldBack,
    KernelChanged,
    RdmaContainer,
    GpuDirectMechanism,
    GpuDirectPair,
    PcieLink,
    PcieAer,
    PortErrors,
    Fleet,
    KubeletResource,
    DriverHealth,
    /// `Observation::Own` of one type: `ObservationKind::own::<T>()`.
    Own {
        id: fn() -> TypeId,
        name: fn() -> &'static str,
    },
}

impl ObservationKind {
    /// The kind of a concern's own observation type `T`.
    pub const fn own<T: Any>() -> Self {
        ObservationKind::Own {
            id: TypeId::of::<T>,
            name: std::any::type_name::<T>,
        }
    }

    fn name(&self) -> &'static str {
        use ObservationKind as K;
        match self {
            K::Containerd => "Containerd",
            K::BaseSpecMemlock => "BaseSpecMemlock",
            K::Nri => "Nri",
            K::Port => "Port",
            K::NetnsMode => "NetnsMode",
            K::RebootRequired => "RebootRequired",
            K::RebootHeldBack => "RebootHeldBack",
            K::KernelChanged => "KernelChanged",
            K::RdmaContainer => "RdmaContainer",
            K::GpuDirectMechanism => "GpuDirectMechanism",
            K::GpuDirectPair => "GpuDirectPair",
            K::PcieLink => "PcieLink",
            K::PcieAer => "PcieAer",
            K::PortErrors => "PortErrors",
            K::Fleet => "Fleet",
            K::KubeletResource => "KubeletResource",
            K::DriverHealth => "DriverHealth",
            K::Own { .. } => "Own",
        }
    }
}

impl PartialEq for ObservationKind {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            // By the type, not by the function pointers (one per codegen unit).
            (ObservationKind::Own { id: a, .. }, ObservationKind::Own { id: b, .. }) => a() == b(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for ObservationKind {}

impl fmt::Debug for ObservationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObservationKind::Own { name, .. } => write!(f, "Own({})", name()),
            k => f.write_str(k.name()),
        }
    }
}

impl fmt::Display for ObservationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Observation {
    /// Its kind (a new variant must be given one here: the match is exhaustive).
    pub fn kind(&self) -> ObservationKind {
        use ObservationKind as K;
        match self {
            Observation::Containerd { .. } => K::Containerd,
            Observation::BaseSpecMemlock { .. } => K::BaseSpecMemlock,
            Observation::Nri { .. } => K::Nri,
            Observation::Port(_) => K::Port,
            Observation::NetnsMode(_) => K::NetnsMode,
            Observation::RebootRequired(_) => K::RebootRequired,
            Observation::RebootHeldBack(_) => K::RebootHeldBack,
            Observation::KernelChanged { .. } => K::KernelChanged,
            Observation::RdmaContainer { .. } => K::RdmaContainer,
            Observation::GpuDirectMechanism(_) => K::GpuDirectMechanism,
            Observation::GpuDirectPair { .. } => K::GpuDirectPair,
            Observation::PcieLink { .. } => K::PcieLink,
            Observation::PcieAer { .. } => K::PcieAer,
            Observation::PortErrors { .. } => K::PortErrors,
            Observation::Fleet(_) => K::Fleet,
            Observation::KubeletResource { .. } => K::KubeletResource,
            Observation::DriverHealth { .. } => K::DriverHealth,
            Observation::Own(own) => own.kind(),
        }
    }
}

/// Any concern's observation type: what `Observation::Own` carries.
pub trait Concerned: Any + Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn eq_dyn(&self, other: &dyn Concerned) -> bool;
    fn kind(&self) -> ObservationKind;
}

impl<T: Any + Debug + PartialEq + Send + Sync> Concerned for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn eq_dyn(&self, other: &dyn Concerned) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
    fn kind(&self) -> ObservationKind {
        ObservationKind::own::<T>()
    }
}

/// One observation of a type the concern that made it owns.
#[derive(Debug, Clone)]
pub struct Own(Arc<dyn Concerned>);

impl Own {
    pub fn new<T: Concerned>(value: T) -> Self {
        Own(Arc::new(value))
    }

    /// The kind of its type.
    pub fn kind(&self) -> ObservationKind {
        self.0.kind()
    }

    /// The value, when it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }
}

impl PartialEq for Own {
    fn eq(&self, other: &Own) -> bool {
        self.0.eq_dyn(&*other.0)
    }
}

/// Every `Observation::Own` of type `T`, in order.
pub fn owned<T: Any>(seen: &[Observation]) -> impl Iterator<Item = &T> {
    seen.iter().filter_map(|o| match o {
        Observation::Own(own) => own.get::<T>(),
        _ => None,
    })
}

/// Why a pod container with RDMA devices cannot register memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RdmaProblem {
    /// No CAP_IPC_LOCK in its effective set (NCCL crashes registering memory).
    NoIpcLock,
    /// RLIMIT_MEMLOCK below target and no CAP_IPC_LOCK to bypass it.
    LowMemlock,
}

impl RdmaProblem {
    pub const ALL: [RdmaProblem; 2] = [RdmaProblem::NoIpcLock, RdmaProblem::LowMemlock];

    /// The label value in metrics and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RdmaProblem::NoIpcLock => "no_ipc_lock",
            RdmaProblem::LowMemlock => "low_memlock",
        }
    }
}

/// Queries over one cycle's observations.
pub trait Observations {
    fn containerd_current_since(&self) -> Option<SystemTime>;
    fn reboot_reasons(&self) -> Vec<String>;
    fn reboot_hold_backs(&self) -> Vec<String>;
    fn netns_mode(&self) -> Option<NetnsMode>;
}

impl Observations for [Observation] {
    fn containerd_current_since(&self) -> Option<SystemTime> {
        self.iter().find_map(|o| match o {
            Observation::Containerd { current_since, .. } => *current_since,
            _ => None,
        })
    }

    fn reboot_reasons(&self) -> Vec<String> {
        self.iter()
            .filter_map(|o| match o {
                Observation::RebootRequired(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    fn reboot_hold_backs(&self) -> Vec<String> {
        self.iter()
            .filter_map(|o| match o {
                Observation::RebootHeldBack(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    fn netns_mode(&self) -> Option<NetnsMode> {
        self.iter().find_map(|o| match o {
            Observation::NetnsMode(m) => *m,
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Observation, ObservationKind, Own, owned};

    #[derive(Debug, PartialEq)]
    struct Mine(u32);
    #[derive(Debug, PartialEq)]
    struct Theirs(u32);

    #[test]
    fn a_concerns_own_observations_read_back_by_type_only() {
        let seen = vec![
            Observation::Own(Own::new(Mine(1))),
            Observation::NetnsMode(None),
            Observation::Own(Own::new(Theirs(2))),
            Observation::Own(Own::new(Mine(3))),
        ];
        let mine: Vec<&Mine> = owned(&seen).collect();
        assert_eq!(mine, [&Mine(1), &Mine(3)]);
        assert_eq!(owned::<Theirs>(&seen).count(), 1);
        // Equal by value and type: a Mine(2) is no Theirs(2).
        assert_eq!(Own::new(Mine(1)), Own::new(Mine(1)));
        assert_ne!(Own::new(Mine(2)), Own::new(Theirs(2)));
    }

    /// A need names a variant, or a concern's own type: two own types are
    /// two kinds, whatever their values.
    #[test]
    fn kinds_are_variants_and_own_types() {
        let mine = Observation::Own(Own::new(Mine(1)));
        assert_eq!(mine.kind(), ObservationKind::own::<Mine>());
        assert_ne!(mine.kind(), ObservationKind::own::<Theirs>());
        assert_ne!(mine.kind(), ObservationKind::NetnsMode);
        assert_eq!(
            Observation::NetnsMode(None).kind(),
            ObservationKind::NetnsMode
        );
        assert_eq!(ObservationKind::NetnsMode.to_string(), "NetnsMode");
        assert!(
            mine.kind().to_string().ends_with("Mine)"),
            "{}",
            mine.kind()
        );
    }
}
