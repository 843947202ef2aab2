//! Every path the host layer reaches by path (listed, opened as a directory,
//! stat'ed, its link read, resolved), for tests that count walks of one
//! (`host::inventory`'s test: one walk of the RDMA class per cycle). Outside
//! tests it records nothing and compiles to nothing.

#[cfg(test)]
use std::path::Path;

#[cfg(test)]
static SEEN: std::sync::Mutex<Vec<(&'static str, std::path::PathBuf)>> =
    std::sync::Mutex::new(Vec::new());

/// `real`: the path reached, as the host layer names it (under the root).
#[cfg(test)]
pub fn record(what: &'static str, real: impl FnOnce() -> std::path::PathBuf) {
    SEEN.lock().unwrap().push((what, real()));
}

#[cfg(not(test))]
#[inline(always)]
pub fn record(_what: &'static str, _real: impl FnOnce() -> std::path::PathBuf) {}

/// What was reached under `dir` (a real path), each as `<what> <path>`, the
/// path relative to `dir`.
#[cfg(test)]
pub fn under(dir: &Path) -> Vec<String> {
    SEEN.lock()
        .unwrap()
        .iter()
        .filter_map(|(what, p)| {
            let rel = p.strip_prefix(dir).ok()?;
            Some(format!("{what} {}", rel.display()))
        })
        .collect()
}
