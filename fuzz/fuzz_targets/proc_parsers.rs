//! Garbage /proc and sysfs-style text: the parsers never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::host::kubepods;
use rdma_node_agent::host::limit::Limit;
use rdma_node_agent::host::procfs;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = procfs::parse_limit(text, procfs::MEMLOCK_ROW);
    let _ = procfs::parse_start_ticks(text);
    let _ = procfs::parse_boot_time(text);
    let _ = kubepods::parse_cgroup(text);
    let _ = Limit::parse(text);
});
