//! Any bytes from a NETLINK_RDMA socket: decoding never panics or reads out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::host::netlink;

fuzz_target!(|data: &[u8]| {
    let _ = netlink::decode(data);
});
