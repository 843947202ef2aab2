//! Any bytes from a NETLINK_RDMA or NETLINK_ROUTE socket: decoding (whole or a
//! datagram at a time) never panics or reads out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::host::netlink;
use rdma_node_agent::host::netlink::restrack;
use rdma_node_agent::host::rtnetlink;

fuzz_target!(|data: &[u8]| {
    let _ = netlink::decode(data);
    // A resource dump's answer: the messages, then each payload's device and owners.
    let mut got = Vec::new();
    let _ = restrack::collect(data, restrack::PD.cmd, 0, &mut got);
    let _ = restrack::parse_device(data);
    for kind in restrack::KINDS {
        let _ = restrack::parse_pids(data, kind);
    }
    // The same answer streamed: each datagram (split at a 0xff byte) folded as
    // it arrives, under a small bound on entries.
    let mut h = restrack::Holders::default();
    let mut entries = 0;
    for datagram in data.split(|b| *b == 0xff) {
        if restrack::fold_datagram(datagram, restrack::PD, 0, "rxe0", &mut h, &mut entries, 64)
            .is_err()
        {
            break;
        }
    }
    assert!(entries <= 64 + data.len());
    // rtnetlink link messages, folded as the daemon's link-event thread does.
    let links = rtnetlink::decode(data);
    let _ = rtnetlink::fold_links(&mut std::collections::HashMap::new(), links);
});
