//! Minimal, style-keeping edits on real files in the styles operators keep them:
//! an operator's base spec keeps its indentation (tabs, four spaces, one line),
//! key order and every value but the rlimits entry; TOML keeps its quote style;
//! CRLF line ends and a UTF-8 byte-order mark stay; runhcs handlers are left
//! alone and said. The files are real-world corpus cases, restyled as stated.

mod support;

use std::path::Path;

use serde_json::Value;
use support::*;

const EKS: &str = "real-world/eks-al2023/root";
const SPEC: &str = "/etc/containerd/base-runtime-spec.json";
const CONFIG: &str = "/etc/containerd/config.toml";

fn root_from(case: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join(case), t.path());
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[systemd]\nenabled = false\n[containerd]\ndaemon_version = 1\n",
    );
    t
}

fn apply(root: &Path) {
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

/// Apply, check the result, apply again (no change), revert (byte-identical).
fn round_trip(root: &Path, check: impl Fn(&str, &str)) {
    let before = snapshot(root);
    let (config0, spec0) = (read(root, CONFIG), read(root, SPEC));
    apply(root);
    check(&read(root, CONFIG), &read(root, SPEC));
    let again = agent(root, &["apply", "--no-restart"]);
    assert_eq!(stdout(&again).trim(), "No changes: the node is converged.");
    assert_eq!(code(&agent(root, &["revert"])), 0);
    assert!(snapshot(root) == before, "revert is not byte-identical");
    assert_eq!((read(root, CONFIG), read(root, SPEC)), (config0, spec0));
}

/// The spec as JSON with its rlimits entry for memlock taken out: what must not change.
fn without_memlock(text: &str) -> Value {
    let mut v: Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).unwrap();
    let r = v["process"]["rlimits"].as_array_mut().unwrap();
    r.retain(|e| e["type"] != "RLIMIT_MEMLOCK");
    v
}

#[test]
fn tabs_crlf_and_bom_survive_and_only_rlimits_change() {
    let t = root_from(EKS);
    let root = t.path();
    // EKS's files, restyled: the spec tab-indented, both with CRLF and a BOM.
    let spec = read(root, SPEC).replace("  ", "\t").replace('\n', "\r\n");
    write(root, SPEC, &format!("\u{feff}{spec}"));
    let config = read(root, CONFIG).replace('\n', "\r\n");
    write(root, CONFIG, &format!("\u{feff}{config}"));
    let spec_before = read(root, SPEC);
    round_trip(root, |config, spec| {
        for (name, text) in [("config", config), ("spec", spec)] {
            assert!(text.starts_with('\u{feff}'), "{name}: BOM lost");
            assert!(
                !text.replace("\r\n", "").contains('\n'),
                "{name}: a bare LF"
            );
        }
        assert!(
            config.contains("base_runtime_spec = \"/etc/containerd/base-runtime-spec.json\"\r\n")
        );
        // Every original line outside process.rlimits is still there, as it was.
        let (head, _) = spec_before.split_once("\t\t\"rlimits\"").unwrap();
        assert!(spec.starts_with(head), "the text before rlimits changed");
        assert!(
            spec.contains("\t\t\t{\r\n\t\t\t\t\"type\": \"RLIMIT_MEMLOCK\",\r\n"),
            "{spec}"
        );
        assert_eq!(without_memlock(spec), without_memlock(&spec_before));
    });
}

#[test]
fn one_line_spec_stays_one_line_and_soft_hard_order_follows_the_file() {
    let t = root_from(EKS);
    let root = t.path();
    let v: Value = serde_json::from_str(&read(root, SPEC)).unwrap();
    let one_line = serde_json::to_string(&v).unwrap();
    write(root, SPEC, &one_line);
    round_trip(root, |_, spec| {
        assert_eq!(spec.lines().count(), 1, "{spec}");
        // EKS writes {"type","soft","hard"}: the new entry does too.
        assert!(
            spec.contains(r#"{"type":"RLIMIT_MEMLOCK","soft":18446744073709551615,"hard":18446744073709551615}"#),
            "{spec}"
        );
        assert_eq!(without_memlock(spec), without_memlock(&one_line));
    });
}

#[test]
fn four_space_spec_keeps_its_indent() {
    let t = root_from("real-world/bottlerocket-nvidia/root");
    let root = t.path();
    let spec = "/etc/containerd/cri-base.json";
    let before = read(root, spec);
    apply(root);
    let after = read(root, spec);
    // Bottlerocket's rendered `"cwd": "/","noNewPrivileges": true` stays as it is;
    // the rlimits member follows it at the file's four-space indent.
    assert!(
        after.contains("        \"cwd\": \"/\",\"noNewPrivileges\": true,\n        \"rlimits\": [\n            {\n                \"type\": \"RLIMIT_MEMLOCK\","),
        "{after}"
    );
    let (head, tail) = before.split_once("\"noNewPrivileges\": true").unwrap();
    assert!(after.starts_with(head) && after.ends_with(tail));
}

#[test]
fn literal_strings_stay_literal() {
    // containerd 2.1's `config default` writes '…' strings.
    let t = root_from("real-world/containerd-2.1-default/root");
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[systemd]\nenabled = false\n[containerd]\ndaemon_version = 2\n",
    );
    apply(root);
    let text = read(root, CONFIG);
    assert!(
        text.contains("base_runtime_spec = '/etc/containerd/rdma-node-agent/base-spec.json'"),
        "{text}"
    );
    assert!(!text.contains("base_runtime_spec = \""), "{text}");
}

#[test]
fn runhcs_handlers_are_left_alone_and_said() {
    // Hand-written: kind's config plus the Windows process-isolation handler of
    // containerd's Windows `config default` (runtime_type io.containerd.runhcs.v1).
    let t = root_from("real-world/kind/root");
    let root = t.path();
    let config = read(root, CONFIG)
        + "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runhcs-wcow-process]\n  runtime_type = \"io.containerd.runhcs.v1\"\n";
    write(root, CONFIG, &config);
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("left alone: runtime handler(s) runhcs-wcow-process run Windows containers"),
        "{}",
        stderr(&o)
    );
    let text = read(root, CONFIG);
    let doc: toml::Table = text.parse().unwrap();
    let r = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"];
    assert!(r["runhcs-wcow-process"].get("base_runtime_spec").is_none());
    assert!(r["runc"].get("base_runtime_spec").is_some());
    let c = json(&agent(root, &["check", "--json"]));
    let cm = check_in(&c, "containerd.memlock");
    assert_eq!(
        cm["details"]["left_alone"],
        serde_json::json!(["runhcs-wcow-process"])
    );
}
