//! The host's own truth about the RDMA driver stack, before and after a reboot:
//! `kernel.change` (the kernel changed since the last run), `kernel.modules` (the
//! required modules are loaded, and the files depmod chose for them match the
//! kernel), `kernel.dkms` (DKMS built and installed the RDMA stack for the
//! running kernel and for every newer installed one, i.e. the one the next
//! reboot boots).
//!
//! Everything is read from files, so `--root` tells the same truth as the live
//! host: installed kernels from their images and module trees, DKMS state from
//! /var/lib/dkms and /lib/modules/<k>/{updates,extra} (file contents compared),
//! `dkms status` only as a cross-check where the tool runs.

mod change;
pub mod concern;
pub mod config;
mod dkms;
mod gather;
pub mod metrics;
pub mod modinfo;
mod modules;
pub mod reasons;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::check::CheckId;
use crate::host::state::STATE_DIR;

pub use change::{changed_from, check_change, compare_releases, next_state};
pub use dkms::{
    BuildState, DkmsBuild, DkmsLine, DkmsState, ToolError, check_dkms, hold_back_reasons,
    parse_dkms_status,
};
pub use gather::gather;
pub use modules::check_modules;

pub const CHANGE: CheckId = CheckId::new("kernel.change");
pub const MODULES: CheckId = CheckId::new("kernel.modules");
pub const DKMS: CheckId = CheckId::new("kernel.dkms");

/// The agent's own bookkeeping (not a host file: never reverted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelState {
    pub release: String,
    pub boot_id: String,
    /// The release before `release`, when the last recorded run saw a change.
    #[serde(default)]
    pub previous: Option<String>,
}

pub fn state_path() -> PathBuf {
    Path::new(STATE_DIR).join("kernel.json")
}

/// The module file depmod chose for a name, with what its `.modinfo` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleFile {
    /// Relative to /lib/modules/<release>/, e.g. `updates/dkms/mlx5_ib.ko`.
    pub path: String,
    /// The release its vermagic names, or why it could not be read.
    pub built_for: Result<String, String>,
    pub version: Option<String>,
    /// The in-tree file of the same name (modules.order) it shadows.
    pub shadows: Option<String>,
}

/// Where a required module comes from, as modprobe would find it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolved {
    File(ModuleFile),
    /// Listed in modules.builtin: part of the kernel image.
    Builtin,
    /// Neither in modules.dep nor modules.builtin.
    Missing,
}

/// What /lib/modules/<running kernel> says about the required modules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleTree {
    /// No /lib/modules/<release> to read.
    Absent,
    /// The directory is there but depmod's modules.dep is not: nothing says
    /// which file modprobe would load.
    NoModulesDep,
    Read(BTreeMap<String, Resolved>),
}

/// A directory of /lib/modules and whether it is a kernel one can boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstalledKernel {
    pub release: String,
    /// `/boot/vmlinuz-<v>` or `/lib/modules/<v>/vmlinuz`.
    pub image: Option<String>,
    /// `kernel/` holds the module tree (a removed kernel leaves only index files).
    pub has_modules: bool,
}

impl InstalledKernel {
    /// Bootable: its image and its modules are there.
    pub fn is_installed(&self) -> bool {
        self.image.is_some() && self.has_modules
    }
}

#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub release: Option<String>,
    pub boot_id: Option<String>,
    pub state: Option<KernelState>,
    /// Why the recorded state could not be used (it does not parse).
    pub state_error: Option<String>,
    /// Loaded modules (names with '_').
    pub loaded: Option<BTreeSet<String>>,
    /// Required modules the running kernel shows as built in, with the
    /// evidence (`/sys/module/ib_core` without `initstate`).
    pub running_builtin: BTreeMap<String, String>,
    pub modules: Option<ModuleTree>,
    /// Every directory of /lib/modules.
    pub kernels: Vec<InstalledKernel>,
    /// DKMS module → its added versions (`source` present).
    pub dkms_modules: BTreeMap<String, BTreeSet<String>>,
    /// Every build under /var/lib/dkms, with its install state from the tree.
    pub dkms: Vec<DkmsBuild>,
    /// `dkms status` on the live host: `None` where it does not run (no tool,
    /// `--root`), `Err` when it failed or timed out.
    pub dkms_status: Option<Result<Vec<DkmsLine>, ToolError>>,
    /// The MLNX_OFED/DOCA or mlx5_core driver version, for fleets to compare.
    pub driver: Option<String>,
}

/// Module names compare with '-' and '_' alike, as the kernel does.
pub(crate) fn norm(name: &str) -> String {
    name.replace('-', "_")
}

/// `mlx5_ib.ko.xz` → `mlx5_ib`.
pub(crate) fn module_name(file: &str) -> Option<String> {
    let stem = file
        .strip_suffix(".ko")
        .or_else(|| file.strip_suffix(".ko.xz"))
        .or_else(|| file.strip_suffix(".ko.zst"))
        .or_else(|| file.strip_suffix(".ko.gz"))?;
    Some(norm(stem))
}
