//! How GPU memory gets registered with the NIC: `peermem` (nvidia_peermem or
//! MLNX_OFED's nv_peer_mem, through MLNX_OFED's peer-memory API) or `dmabuf`
//! (the kernel's DMA-BUF, exported by the open GPU kernel modules), decided
//! from the host's own files. Pure.
//!
//! Sources of each requirement:
//! - peermem: NCCL's `ibGdrSupportInitOnce` (src/transport/net_ib, NVIDIA/nccl)
//!   uses GPUDirect RDMA through peer memory only when
//!   `/sys/kernel/mm/memory_peers/nv_mem/version` (or `nv_mem_nc`) exists, or
//!   `/sys/module/nvidia_peermem/version` in newer releases; UCX
//!   (`uct_ib_md_open`) looks at the same files. A module that is loaded but
//!   registered nowhere (NCCL issues #1939, #1537) gives no GPUDirect. On an
//!   inbox RDMA stack nvidia_peermem cannot load at all: it needs
//!   `ib_register_peer_memory_client`, which only MLNX_OFED/DOCA-OFED export
//!   (siderolabs/talos#12021).
//! - dmabuf: NVIDIA's GPU Operator guide ("GPUDirect RDMA and GPUDirect
//!   Storage") recommends DMA-BUF and ties it to the open GPU kernel modules;
//!   NVIDIA's driver installation guide ("Kernel Modules") says the open flavour
//!   exists from the 515 series. The RDMA DMA-BUF import (`ibv_reg_dmabuf_mr`)
//!   came in Linux 5.12 (commit bfe0cc6eb249, "RDMA/uverbs: Add uverbs command
//!   for dma-buf based MR registration", as aws-ofi-nccl's nccl_ofi_dmabuf.c
//!   checks). The peer-to-peer mapping needs `CONFIG_PCI_P2PDMA=y`
//!   (siderolabs/talos#12021 and siderolabs/pkgs#1356, which enabled it for
//!   exactly this) and `CONFIG_DMA_SHARED_BUFFER`. `CONFIG_DMABUF_MOVE_NOTIFY`
//!   is reported but not required: without it the kernel pins a dynamic
//!   attachment on map (drivers/dma-buf/dma-buf.c), which is what the RDMA
//!   importer asks for anyway, and upstream is removing the option (2026,
//!   "dma-buf: remove CONFIG_DMABUF_MOVE_NOTIFY").
//! - NCCL probes DMA-BUF at run time with a dummy `ibv_reg_dmabuf_mr(fd=-1)`
//!   (`ncclIbDmaBufSupport`); the agent cannot open verbs in a read-only
//!   check, so it decides from the same kernel and driver facts that make
//!   that call succeed, and says which one is missing.

use serde::Serialize;

/// The GPU driver as `/proc/driver/nvidia/version` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Driver {
    pub open: bool,
    /// `580.159.04`.
    pub version: String,
    pub major: u32,
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build …`
/// or `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 …`.
pub fn parse_driver(text: &str) -> Option<Driver> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let open = line.contains("Open Kernel Module");
    let version = line
        .split_whitespace()
        .find(|w| {
            let mut parts = w.split('.');
            parts.next().is_some_and(|m| m.parse::<u32>().is_ok())
                && parts.next().is_some_and(|m| m.parse::<u32>().is_ok())
        })?
        .to_owned();
    let major = version.split('.').next()?.parse().ok()?;
    Some(Driver {
        open,
        version,
        major,
    })
}

/// `(major, minor)` of a kernel release (`6.18.44-fc-v657-gpu`, `5.15.0-91-generic`).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// A kernel config option's value (`y`, `m`, a string) or `None` when not set.
pub fn kconfig<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('=')?;
        Some(rest.trim())
    })
}

/// What the host shows about the GPUDirect modules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeermemFacts {
    /// `nvidia_peermem` or `nv_peer_mem` in /proc/modules or /sys/module.
    pub loaded: Option<String>,
    /// Entries of /sys/kernel/mm/memory_peers with a `version` file.
    pub registered: Vec<String>,
}

/// The kernel's configuration as read, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelConfig {
    Read {
        source: String,
        text: String,
    },
    /// Neither file exists; the paths looked at.
    Missing(String),
    /// A file exists but could not be read (permission, corrupt gzip).
    Unreadable(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MechanismFacts {
    pub peermem: PeermemFacts,
    /// `None`: /proc/driver/nvidia/version absent (driver not loaded); `Err`: unreadable.
    pub driver: Result<Option<String>, String>,
    pub kernel_release: Option<String>,
    pub kconfig: KernelConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Peermem,
    Dmabuf,
    None,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Peermem, Kind::Dmabuf, Kind::None];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Peermem => "peermem",
            Kind::Dmabuf => "dmabuf",
            Kind::None => "none",
        }
    }
}

/// The decision: which mechanism, what each lacks, and what could not be told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mechanism {
    pub kind: Kind,
    pub peermem: bool,
    pub dmabuf: bool,
    /// Why peermem is not there (empty when it is).
    pub peermem_missing: Vec<String>,
    /// Why DMA-BUF is not there (empty when it is).
    pub dmabuf_missing: Vec<String>,
    /// A fact DMA-BUF depends on that could not be read (then, without
    /// peermem, the mechanism is unknown rather than `none`).
    pub unknown: Option<String>,
    /// Facts worth showing that decide nothing (DMABUF_MOVE_NOTIFY).
    pub notes: Vec<String>,
    pub driver: Option<Driver>,
}

const MEMORY_PEERS: &str = "/sys/kernel/mm/memory_peers";

pub fn decide(f: &MechanismFacts) -> Mechanism {
    let peermem_missing = peermem_missing(f);
    let mut d = Dmabuf::default();
    let driver = d.driver(&f.driver);
    d.kernel(f.kernel_release.as_deref());
    d.kconfig(&f.kconfig);
    let Dmabuf {
        missing: dmabuf_missing,
        mut unknown,
        notes,
    } = d;
    // Something definitely missing settles DMA-BUF, whatever else is unreadable.
    let dmabuf = dmabuf_missing.is_empty() && unknown.is_none();
    if !dmabuf_missing.is_empty() {
        unknown = None;
    }
    let peermem = peermem_missing.is_empty();
    // NCCL uses DMA-BUF when both work (NCCL_DMABUF_ENABLE defaults to 1).
    let kind = if dmabuf {
        Kind::Dmabuf
    } else if peermem {
        Kind::Peermem
    } else {
        Kind::None
    };
    Mechanism {
        kind,
        peermem,
        dmabuf,
        peermem_missing,
        dmabuf_missing,
        unknown: if peermem { None } else { unknown },
        notes,
        driver,
    }
}

/// What nvidia_peermem lacks: loaded, and registered with the RDMA stack.
fn peermem_missing(f: &MechanismFacts) -> Vec<String> {
    match (&f.peermem.loaded, f.peermem.registered.is_empty()) {
        (_, false) => Vec::new(),
        (None, true) => vec![
            "nvidia_peermem is not loaded (it needs MLNX_OFED/DOCA-OFED's peer-memory API)"
                .to_owned(),
        ],
        (Some(m), true) => vec![format!(
            "{m} is loaded but registered nowhere under {MEMORY_PEERS} (no */version): the RDMA stack has no peer-memory API"
        )],
    }
}

/// What DMA-BUF lacks, what could not be read (the first unreadable fact),
/// and notes, from the driver, the kernel and its configuration.
#[derive(Default)]
struct Dmabuf {
    missing: Vec<String>,
    unknown: Option<String>,
    notes: Vec<String>,
}

impl Dmabuf {
    /// The NVIDIA driver: loaded, open flavour, 515 or newer.
    fn driver(&mut self, version: &Result<Option<String>, String>) -> Option<Driver> {
        let driver = match version {
            Ok(Some(text)) => {
                let d = parse_driver(text);
                if d.is_none() {
                    self.unknown = Some(
                        "/proc/driver/nvidia/version has no NVRM version line the agent can read"
                            .to_owned(),
                    );
                }
                d
            }
            Ok(None) => {
                self.missing.push(
                    "the NVIDIA driver is not loaded (/proc/driver/nvidia/version absent)"
                        .to_owned(),
                );
                None
            }
            Err(e) => {
                self.unknown = Some(format!("cannot read /proc/driver/nvidia/version: {e}"));
                None
            }
        };
        if let Some(d) = &driver {
            if !d.open {
                self.missing.push(format!(
                    "driver {} is the proprietary flavour: DMA-BUF export needs the open kernel modules (515 or newer)",
                    d.version
                ));
            } else if d.major < 515 {
                self.missing
                    .push(format!("driver {} is older than the 515 series", d.version));
            }
        }
        driver
    }

    /// The kernel: 5.12 or newer for RDMA DMA-BUF registration.
    fn kernel(&mut self, release: Option<&str>) {
        match release.map(|r| (r, kernel_version(r))) {
            Some((r, Some(v))) if v < (5, 12) => self.missing.push(format!(
                "kernel {r} is older than 5.12 (no RDMA DMA-BUF registration)"
            )),
            Some((_, Some(_))) => {}
            _ => {
                self.unknown.get_or_insert_with(|| {
                    "the kernel release (/proc/sys/kernel/osrelease) is unreadable".to_owned()
                });
            }
        }
    }

    /// The kernel's configuration: PCI P2PDMA and DMA-BUF built.
    fn kconfig(&mut self, kconfig_facts: &KernelConfig) {
        match kconfig_facts {
            KernelConfig::Read { source, text } => {
                for (opt, why) in [
                    ("CONFIG_PCI_P2PDMA", "no PCI peer-to-peer DMA"),
                    ("CONFIG_DMA_SHARED_BUFFER", "no DMA-BUF"),
                ] {
                    if !matches!(kconfig(text, opt), Some("y" | "m")) {
                        self.missing
                            .push(format!("{opt} is not set in {source} ({why})"));
                    }
                }
                if kconfig(text, "CONFIG_DMABUF_MOVE_NOTIFY").is_none() {
                    self.notes.push(format!(
                        "CONFIG_DMABUF_MOVE_NOTIFY is not set in {source} (not needed: the RDMA importer pins)"
                    ));
                }
            }
            KernelConfig::Missing(paths) => {
                self.unknown
                    .get_or_insert_with(|| format!("no kernel configuration to read ({paths})"));
            }
            KernelConfig::Unreadable(e) => {
                self.unknown.get_or_insert_with(|| e.clone());
            }
        }
    }
}

impl Mechanism {
    /// `dmabuf`, `peermem`, or `none (…the missing pieces…)`.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Dmabuf | Kind::Peermem => self.kind.as_str().to_owned(),
            Kind::None => match &self.unknown {
                Some(u) => format!("unknown ({u})"),
                None => {
                    let all: Vec<&str> = self
                        .peermem_missing
                        .iter()
                        .chain(&self.dmabuf_missing)
                        .map(String::as_str)
                        .collect();
                    format!("none ({})", all.join("; "))
                }
            },
        }
    }
}
