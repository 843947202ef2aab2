//! Any text through the secret mask: never panics, keeps the line count (diffs
//! stay aligned), and a `password = "…"` line planted anywhere never survives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::redact::redact;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let out = redact(text);
    assert_eq!(out.lines().count(), text.lines().count());
    // The same text with a credential line appended: that value is gone.
    if !text.contains("FUZZSECRET") && (text.is_empty() || text.ends_with('\n')) {
        let planted = format!("{text}password = \"FUZZSECRET\"\n");
        let out = redact(&planted);
        let last = out.lines().last().unwrap_or("");
        assert!(!last.contains("FUZZSECRET"), "{out}");
    }
});
