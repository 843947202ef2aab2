//! Any agent config: parsing never panics, and an error always has a location.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::concerns::registry::SECTIONS;
use rdma_node_agent::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = Config::parse(text, Path::new("c.toml"), SECTIONS) {
        assert!(e.to_string().starts_with("c.toml:"), "{e}");
    }
});
