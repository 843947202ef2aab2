//! The documented default config must be exactly the built-in defaults: uncommenting
//! nothing and parsing it, or uncommenting every `# key = value` line, gives `Config::default()`.

use std::path::Path;

use rdma_node_agent::concerns::registry::SECTIONS;
use rdma_node_agent::config::Config;

fn doc() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/rdma-node-agent/config.toml"),
    )
    .unwrap()
}

#[test]
fn shipped_file_parses_to_defaults() {
    assert_eq!(
        Config::parse(&doc(), Path::new("config.toml"), SECTIONS).unwrap(),
        Config::default()
    );
}

#[test]
fn every_documented_default_is_the_real_default() {
    // Uncomment `# key = value` and `# [table]` lines, except example tables and their keys.
    let mut out = String::new();
    let mut in_example = false;
    for line in doc().lines() {
        match line.strip_prefix("# ") {
            None => {
                // A real table header ends a commented-out example table.
                if line.starts_with('[') {
                    in_example = false;
                }
                out.push_str(line);
                out.push('\n');
            }
            // Commented-out tables are examples, not defaults.
            Some(rest) if rest.starts_with('[') => in_example = true,
            Some(rest) => {
                let is_key = rest.split_once(" = ").is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                if is_key && !in_example {
                    out.push_str(rest);
                    out.push('\n');
                }
            }
        }
    }
    assert!(out.contains("below_target = \"warn\""), "{out}");
    assert_eq!(
        Config::parse(&out, Path::new("uncommented.toml"), SECTIONS).unwrap(),
        Config::default(),
        "{out}"
    );
}
