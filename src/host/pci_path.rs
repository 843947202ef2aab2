//! Where a PCI function sits in the hierarchy, from sysfs: the real directory
//! a device link leads to (`/sys/devices/pci0000:00/0000:00:10.0/0000:03:00.0`)
//! and the functions above it up to the root port. Shared by the concerns that
//! watch a device's upstream path (`pcie.aer`); read only, every path under `--root`.

use std::path::{Path, PathBuf};

use super::HostError;
use super::read::ReadHost;

/// One PCI function on a path, with its real sysfs directory (no link in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub bdf: String,
    pub dir: PathBuf,
}

/// A function and every function above it, the root port first, the function last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamPath {
    /// `pci0000:00`: the host bridge (not a PCI function).
    pub host_bridge: String,
    pub functions: Vec<Function>,
}

impl UpstreamPath {
    /// The function itself (the last on its path).
    pub fn function(&self) -> &Function {
        self.functions.last().expect("a path has its function")
    }

    /// The bridges and ports above the function, the root port first.
    pub fn upstream(&self) -> &[Function] {
        &self.functions[..self.functions.len() - 1]
    }
}

/// `0000:1b:00.0` (the domain may be wider than 4 digits behind a VMD).
pub fn is_bdf(s: &str) -> bool {
    let Some((rest, func)) = s.rsplit_once('.') else {
        return false;
    };
    let segs: Vec<&str> = rest.split(':').collect();
    func.len() == 1
        && func.chars().all(|c| c.is_ascii_digit())
        && segs.len() == 3
        && segs
            .iter()
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The path of a resolved sysfs directory; `None` when it is not a PCI
/// function under a host bridge (a virtual device, a platform device).
pub fn path_of(real: &Path) -> Option<UpstreamPath> {
    let rest = real.strip_prefix("/sys/devices").ok()?;
    let mut parts = rest.components().map(|c| c.as_os_str().to_string_lossy());
    let host_bridge = parts.next()?.into_owned();
    if !host_bridge.starts_with("pci") {
        return None;
    }
    let mut dir = Path::new("/sys/devices").join(&host_bridge);
    let mut functions = Vec::new();
    for p in parts {
        dir.push(p.as_ref());
        // A VMD's domain is a host bridge below a function: the path goes on.
        if p.starts_with("pci") && !is_bdf(&p) {
            continue;
        }
        // Anything else that is not a function (a virtual bus's node) ends it.
        if !is_bdf(&p) {
            return None;
        }
        functions.push(Function {
            bdf: p.into_owned(),
            dir: dir.clone(),
        });
    }
    (!functions.is_empty()).then_some(UpstreamPath {
        host_bridge,
        functions,
    })
}

/// Where the sysfs link `link` (`/sys/class/infiniband/mlx5_0/device`,
/// `/sys/bus/pci/devices/<bdf>`) leads: `Ok(None)` when it leads nowhere PCI.
pub fn upstream_path(host: &ReadHost, link: &Path) -> Result<Option<UpstreamPath>, HostError> {
    let real = host.resolve(link)?;
    Ok(path_of(&real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_lists_the_functions_root_port_first() {
        let p = path_of(Path::new(
            "/sys/devices/pci0000:00/0000:00:10.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        ))
        .unwrap();
        assert_eq!(p.host_bridge, "pci0000:00");
        assert_eq!(p.function().bdf, "0000:03:00.0");
        let up: Vec<&str> = p.upstream().iter().map(|f| f.bdf.as_str()).collect();
        assert_eq!(up, ["0000:00:10.0", "0000:01:00.0", "0000:02:00.0"]);
        assert_eq!(
            p.upstream()[0].dir,
            Path::new("/sys/devices/pci0000:00/0000:00:10.0")
        );
        // On the root bus (the real H200 VM's GPU): no bridge above it.
        let p = path_of(Path::new("/sys/devices/pci0000:00/0000:00:06.0")).unwrap();
        assert!(p.upstream().is_empty());
    }

    #[test]
    fn what_is_not_a_pci_function_has_no_path() {
        for s in [
            "/sys/devices/virtual/net/rxe0",
            "/sys/devices/pci0000:00",
            "/sys/devices/platform/foo",
            "/sys/devices/pci0000:00/0000:00:1d.0/net/eth0",
            "/proc/x",
        ] {
            assert_eq!(path_of(Path::new(s)), None, "{s}");
        }
        // Behind a VMD (its own domain 10000): the VMD function and below.
        let p = path_of(Path::new(
            "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
        ))
        .unwrap();
        let all: Vec<&str> = p.functions.iter().map(|f| f.bdf.as_str()).collect();
        assert_eq!(all, ["0000:00:0e.0", "10000:e0:06.0", "10000:e1:00.0"]);
        assert!(is_bdf("10000:e1:00.0"));
        assert!(!is_bdf("0000:e1:00"));
    }
}
