//! GPUDirect RDMA: with NVIDIA GPUs present, are `nvidia_peermem` (GPU memory
//! registration for verbs) and `gdrdrv` (GDRCopy) loaded? Reported in `rdma.devices`.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use crate::config::rdma::GpuDirectModule;
use crate::host::HostError;
use crate::host::snapshot::{self, Snapshot};

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";
const NVIDIA_VENDOR: &str = "0x10de";
/// MLNX_OFED's older name for what the NVIDIA driver now ships as nvidia_peermem.
const LEGACY_PEERMEM: &str = "nv_peer_mem";

#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// PCI addresses of NVIDIA GPUs.
    pub gpus: BTreeSet<String>,
    /// Loaded modules (first column of /proc/modules).
    pub modules: BTreeSet<String>,
    /// PCI functions whose vendor or class could not be read, with why: any
    /// of them may be a GPU.
    pub unreadable: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub gpus: usize,
    pub nvidia_peermem: bool,
    pub gdrdrv: bool,
    /// Required modules that are not loaded (only when GPUs are present).
    pub missing: Vec<&'static str>,
    /// Why a required module's absence cannot be judged: no GPU was seen, but
    /// some PCI functions could not be read.
    pub unknown: Vec<String>,
}

impl Finding {
    /// A short phrase for the check message; `None` without GPUs.
    pub fn summary(&self) -> Option<String> {
        if self.gpus == 0 {
            return None;
        }
        let state = |loaded| if loaded { "loaded" } else { "not loaded" };
        Some(format!(
            "{} NVIDIA GPU(s): nvidia_peermem {}, gdrdrv {}",
            self.gpus,
            state(self.nvidia_peermem),
            state(self.gdrdrv)
        ))
    }
}

/// A display or 3D controller (class 0x0300xx / 0x0302xx) from NVIDIA.
pub fn is_nvidia_gpu(vendor: &str, class: &str) -> bool {
    let class = class.trim();
    vendor.trim() == NVIDIA_VENDOR && (class.starts_with("0x0300") || class.starts_with("0x0302"))
}

pub fn parse_modules(proc_modules: &str) -> BTreeSet<String> {
    proc_modules
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

pub fn gather(host: &Snapshot) -> Result<Facts, HostError> {
    let mut gpus = BTreeSet::new();
    let mut unreadable = Vec::new();
    // A function whose vendor or class cannot be read is not "not a GPU".
    let read = |p: &Path| -> Result<String, String> {
        match host.read_string(p) {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err(format!("{} is missing", host.path(p).display())),
            Err(e) => Err(e.to_string()),
        }
    };
    for dev in host.list_dir(Path::new(PCI_DEVICES))? {
        let dir = Path::new(PCI_DEVICES).join(&dev);
        // Only the vendor of most functions is read; the class only for NVIDIA ones.
        let vendor = match read(&dir.join("vendor")) {
            Ok(v) => v,
            Err(e) => {
                unreadable.push(e);
                continue;
            }
        };
        if vendor.trim() != NVIDIA_VENDOR {
            continue;
        }
        match read(&dir.join("class")) {
            Ok(class) if is_nvidia_gpu(NVIDIA_VENDOR, &class) => {
                gpus.insert(dev);
            }
            Ok(_) => {}
            Err(e) => unreadable.push(e),
        }
    }
    gpus.extend(host.list_dir(Path::new(NVIDIA_GPUS))?);
    let modules = host
        .file(snapshot::PROC_MODULES)
        .map(|t| parse_modules(&t))
        .unwrap_or_default();
    Ok(Facts {
        gpus,
        modules,
        unreadable,
    })
}

pub fn decide(f: &Facts, required: &[GpuDirectModule]) -> Finding {
    let nvidia_peermem = f.modules.contains("nvidia_peermem") || f.modules.contains(LEGACY_PEERMEM);
    let gdrdrv = f.modules.contains("gdrdrv");
    let req: BTreeSet<&GpuDirectModule> = required.iter().collect();
    let not_loaded: Vec<&'static str> = req
        .into_iter()
        .filter(|m| match m {
            GpuDirectModule::NvidiaPeermem => !nvidia_peermem,
            GpuDirectModule::Gdrdrv => !gdrdrv,
        })
        .map(|m| m.name())
        .collect();
    let (missing, unknown) = match (f.gpus.is_empty(), f.unreadable.is_empty()) {
        (false, _) => (not_loaded, Vec::new()),
        (true, true) => (Vec::new(), Vec::new()),
        // No GPU seen, but some functions were not seen either: a requirement
        // that is not met cannot be called met.
        (true, false) => (
            Vec::new(),
            not_loaded
                .iter()
                .map(|m| {
                    format!(
                        "GPUDirect module {m} is not loaded and whether NVIDIA GPUs are present is unknown: {} PCI function(s) could not be read ({})",
                        f.unreadable.len(),
                        f.unreadable.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
                    )
                })
                .collect(),
        ),
    };
    Finding {
        gpus: f.gpus.len(),
        nvidia_peermem,
        gdrdrv,
        missing,
        unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_by_vendor_and_class() {
        assert!(is_nvidia_gpu("0x10de\n", "0x030200\n"));
        assert!(is_nvidia_gpu("0x10de", "0x030000"));
        // An NVIDIA audio function or NVSwitch bridge is not a GPU.
        assert!(!is_nvidia_gpu("0x10de", "0x040300"));
        assert!(!is_nvidia_gpu("0x15b3", "0x020700"));
    }

    #[test]
    fn required_modules_only_matter_with_gpus() {
        let modules = parse_modules(
            "nvidia_peermem 16384 0 - Live 0x0000000000000000\nnvidia 56885248 2 nvidia_peermem, Live 0x0\n",
        );
        let req = [GpuDirectModule::Gdrdrv, GpuDirectModule::NvidiaPeermem];
        let mut f = Facts {
            gpus: BTreeSet::new(),
            modules,
            unreadable: Vec::new(),
        };
        assert!(decide(&f, &req).missing.is_empty());
        f.gpus.insert("0000:07:00.0".into());
        let d = decide(&f, &req);
        assert_eq!(d.missing, vec!["gdrdrv"]);
        assert_eq!(
            d.summary().unwrap(),
            "1 NVIDIA GPU(s): nvidia_peermem loaded, gdrdrv not loaded"
        );
        f.modules = parse_modules("nv_peer_mem 1 0 - Live 0x0\n");
        assert!(decide(&f, &[GpuDirectModule::NvidiaPeermem]).nvidia_peermem);
    }

    /// An NVIDIA function whose class cannot be read (here a directory in the
    /// file's place) is not a missing GPU: with a module required and not
    /// loaded, the requirement is unknown, not met.
    #[test]
    fn unreadable_pci_function_is_unknown_not_no_gpu() {
        let t = tempfile::tempdir().unwrap();
        let dev = t.path().join("sys/bus/pci/devices/0000:07:00.0");
        std::fs::create_dir_all(dev.join("class")).unwrap();
        std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
        let nic = t.path().join("sys/bus/pci/devices/0000:08:00.0");
        std::fs::create_dir_all(&nic).unwrap();
        let snap = Snapshot::new(crate::host::Host::new(t.path()));
        let f = gather(&snap).unwrap();
        assert_eq!(f.unreadable.len(), 2, "{:?}", f.unreadable);
        let d = decide(&f, &[GpuDirectModule::NvidiaPeermem]);
        assert!(d.missing.is_empty());
        assert_eq!(d.unknown.len(), 1);
        assert!(
            d.unknown[0].contains("0000:07:00.0/class"),
            "{:?}",
            d.unknown
        );
        assert!(
            d.unknown[0].contains("0000:08:00.0/vendor is missing"),
            "{:?}",
            d.unknown
        );
        // Nothing required: nothing unknown.
        assert!(decide(&f, &[]).unknown.is_empty());
    }
}
