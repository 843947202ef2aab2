//! What the containerd tests read back from a tree the agent worked on.

use std::path::Path;

use serde_json::Value;

use super::{agent, json};

/// RLIMIT_MEMLOCK (soft, hard) in a base spec's text; `None` when it has none.
pub fn memlock_of(spec_text: &str) -> Option<(u64, u64)> {
    let v: Value = serde_json::from_str(spec_text).unwrap();
    v["process"]["rlimits"]
        .as_array()?
        .iter()
        .find(|r| r["type"] == "RLIMIT_MEMLOCK")
        .map(|r| (r["soft"].as_u64().unwrap(), r["hard"].as_u64().unwrap()))
}

/// (handler, base_runtime_spec) as `containerd.memlock` reports them.
pub fn handlers_of(root: &Path) -> Vec<(String, String)> {
    let c = json(&agent(root, &["check", "--json"]));
    let check = c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "containerd.memlock")
        .unwrap()
        .clone();
    check["details"]["handlers"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|h| {
            (
                h["handler"].as_str().unwrap().to_owned(),
                h["base_runtime_spec"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
