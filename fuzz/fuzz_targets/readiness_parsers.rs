//! Garbage kubelet checkpoints, perftest output and /proc text for pods.rdma:
//! the parsers never panic, and a checkpoint that parses always renders (or
//! says which AllocResp is not base64).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::concerns::readiness::{checkpoint::Checkpoint, pods_rdma};
use rdma_node_agent::selftest::perftest;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cp) = Checkpoint::parse(text) {
        let _ = cp.registered();
        let _ = cp.checksum_ok();
    }
    let _ = perftest::parse(text);
    let _ = pods_rdma::parse_cap_eff(text);
    let _ = pods_rdma::parse_limit_pair(text, "Max locked memory");
    let _ = pods_rdma::parse_devices_list(text);
    let _ = pods_rdma::is_rdma_path(text);
});
