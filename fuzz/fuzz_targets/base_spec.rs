//! Any base spec: patching never panics; when it succeeds the result is JSON with
//! the exact memlock, and patching it again changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::concerns::containerd::spec::{self, Rlimits};
use rdma_node_agent::host::limit::Limit;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for own in [false, true] {
        let limits = Rlimits {
            memlock: Limit(4 << 20),
            extra: vec![],
        };
        let Ok(out) = spec::patch(text, &limits, own) else {
            continue;
        };
        // A byte-order mark the operator's file had is kept.
        let body = out.strip_prefix('\u{feff}').unwrap_or(&out);
        let _: serde_json::Value = serde_json::from_str(body).expect("patched spec is JSON");
        assert_eq!(spec::memlock(&out), Some((4 << 20, 4 << 20)));
        assert_eq!(
            spec::patch(&out, &limits, own).unwrap(),
            out,
            "patch is not idempotent"
        );
    }
});
