//! Every directory the host layer lists or opens by path, for tests that
//! count walks of one (`host::inventory`'s test: one walk of the RDMA class).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

static SEEN: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());

pub fn record(what: &'static str, real: &Path) {
    SEEN.lock().unwrap().push((what, real.to_owned()));
}

/// What was listed or opened under `dir` (a real path), each as
/// `list <path>` or `open <path>`, the path relative to `dir`.
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
