//! Any config.toml: the edit never panics; when it succeeds the result parses,
//! keeps its version, and a second edit changes nothing (idempotent).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::concerns::containerd::{self, Facts};
use rdma_node_agent::config::ContainerdConfig;

fn facts(text: &str) -> Option<Facts> {
    containerd::facts_from_text(text).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(f) = facts(text) else { return };
    let cfg = ContainerdConfig::default();
    let Ok(d) = containerd::decide(&f, &cfg, &|p| p.to_owned()) else {
        return;
    };
    let edited = d
        .plan
        .changes
        .iter()
        .find(|c| c.path == Path::new("/etc/containerd/config.toml"))
        .and_then(|c| c.new.clone())
        .map(|b| String::from_utf8(b).expect("edits are UTF-8"))
        .unwrap_or_else(|| text.to_owned());
    let again = facts(&edited).expect("an edited config parses");
    assert_eq!(
        again.set.version, f.set.version,
        "the edit changed the version"
    );
    let d2 = containerd::decide(&again, &cfg, &|p| p.to_owned())
        .expect("an edited config still decides");
    assert!(
        !d2.plan
            .changes
            .iter()
            .any(|c| c.path == Path::new("/etc/containerd/config.toml")),
        "second edit changed config.toml again:\n{edited}"
    );
});
