//! Any bytes from a NETLINK_RDMA socket: decoding never panics or reads out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::host::netlink;
use rdma_node_agent::host::netlink::restrack;

fuzz_target!(|data: &[u8]| {
    let _ = netlink::decode(data);
    // A resource dump's answer: the messages, then each payload's device and owners.
    let mut got = Vec::new();
    let _ = restrack::collect(data, restrack::PD.cmd, 0, &mut got);
    let _ = restrack::parse_device(data);
    for kind in restrack::KINDS {
        let _ = restrack::parse_pids(data, kind);
    }
});
