//! Garbage in sysfs, /proc/cmdline, ofed_info, kernel release or `dkms status`
//! text: the parsers never panic, and what they accept is well-formed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::concerns::kernel::{DkmsState, parse_dkms_status};
use rdma_node_agent::concerns::rdma::{devices, netns};
use rdma_node_agent::host::inventory::port;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rate) = port::parse_rate(text) {
        assert!(rate.is_finite() && rate >= 0.0);
    }
    // The number before the colon decides (the kernel's ABI): text other than
    // the kernel's spelling for that number is always noted, never silently taken.
    if let Ok(state) = port::parse_state(text) {
        let printed = format!("{}: {}", state.0, state.name());
        assert!(text.trim_end_matches('\n') == printed || port::state_note(text).is_some());
    }
    if let Ok(state) = port::parse_phys_state(text) {
        let printed = format!("{}: {}", state.0, state.name());
        assert!(text.trim_end_matches('\n') == printed || port::phys_state_note(text).is_some());
    }
    let _ = port::parse_link_layer(text);
    let _ = devices::parse_guid(text);
    let _ = devices::parse_text(text);
    // One entry per non-empty line; a known state always names its module.
    let lines = parse_dkms_status(text);
    assert_eq!(
        lines.len(),
        text.lines().filter(|l| !l.trim_end().is_empty()).count()
    );
    for l in &lines {
        assert!(matches!(l.state, DkmsState::Unknown(_)) || !l.module.is_empty());
    }
    let _ = netns::parse_param(text);
    let _ = netns::parse_kernel(text);
    let _ = netns::parse_ofed(text);
    let _ = netns::cmdline_mode(text);
    let _ = netns::cgroup_leaf(text);
});
