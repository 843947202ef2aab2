//! Real artefacts fetched by `scripts/fixtures/fetch-artefacts.sh` (Debian's
//! linux-source-6.1 sysfs.c, linux-image cloud kernels) into a cache outside
//! the checkout. Without them a test says so and passes, unless
//! RDMA_AGENT_REQUIRE_ARTEFACTS is set (scripts/test.sh sets it), when it fails.

use std::path::PathBuf;

pub fn dir() -> Option<PathBuf> {
    let d = PathBuf::from(
        std::env::var_os("RDMA_AGENT_ARTEFACTS")
            .unwrap_or_else(|| "/var/cache/rdma-node-agent/artefacts".into()),
    );
    if d.join("PROVENANCE").exists() {
        return Some(d);
    }
    if std::env::var_os("RDMA_AGENT_REQUIRE_ARTEFACTS").is_some() {
        panic!(
            "{} has no artefacts: run scripts/fixtures/fetch-artefacts.sh",
            d.display()
        );
    }
    eprintln!(
        "SKIPPED: no real artefacts in {} (run scripts/fixtures/fetch-artefacts.sh)",
        d.display()
    );
    None
}

/// The cached kernel releases, oldest first, each with its unpacked package root.
pub fn kernels() -> Option<Vec<(String, PathBuf)>> {
    let d = dir()?;
    let list = std::fs::read_to_string(d.join("kernels/RELEASES")).ok()?;
    Some(
        list.lines()
            .map(|r| (r.to_owned(), d.join("kernels").join(r)))
            .collect(),
    )
}
