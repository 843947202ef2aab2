//! Credentials never leave the file: every output channel, searched.

use std::fs;
use std::path::Path;

use super::support::*;
use super::{CONFIG, Daemon, STATE, stdout_of};

/// Credentials planted next to every table and file the agent edits.
const PLANTED: &[&str] = &[
    "PLANTED-password",
    "PLANTED-auth-b64",
    "PLANTED-identitytoken",
    "PLANTED-token",
    "PLANTED-header",
    "PLANTED-env",
    "PLANTED-dropin",
];

fn plant_secrets(root: &Path) {
    let cfg = root.join(CONFIG);
    let text = fs::read_to_string(&cfg).unwrap();
    // The agent adds `base_runtime_spec` after a handler's `runtime_type`, and a
    // diff shows the 3 lines after an edit: each handler here is followed by a
    // credential table, so every kind of credential is diff context.
    let after = |name: &str, secrets: &str| {
        format!(
            "        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{name}]\n          runtime_type = \"io.containerd.runc.v2\"\n{secrets}"
        )
    };
    let marker = "          runtime_type = \"io.containerd.runc.v2\"\n";
    assert!(text.contains(marker));
    let runc = r#"    [plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.com".auth]
      password = "PLANTED-password"
      auth = "PLANTED-auth-b64"
      username = "robot"
"#;
    // runc gets a base spec from the agent (an edit of config.toml), and so do
    // a, b and c; nvidia uses the operator's spec, which the agent patches.
    let text = text.replacen(marker, &format!("{marker}{runc}"), 1)
        + &after(
            "a",
            r#"    [plugins."io.containerd.grpc.v1.cri".registry.configs."a.example".auth]
      identitytoken = "PLANTED-identitytoken"
      username = "u"
"#,
        )
        + &after(
            "b",
            r#"    [plugins."io.containerd.grpc.v1.cri".registry.configs."b.example"]
      auth = { username = "u", password = "PLANTED-password", token = "PLANTED-token" }
"#,
        )
        + &after(
            "c",
            r#"    [plugins."io.containerd.grpc.v1.cri".registry.headers]
      Authorization = [
        "Bearer PLANTED-header",
      ]
"#,
        )
        + r#"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          base_runtime_spec = "/etc/containerd/cri-base.json"
[plugins."io.containerd.grpc.v1.cri".registry.configs."third.example.com".auth]
  registrytoken = "PLANTED-token"
"#;
    fs::write(&cfg, text).unwrap();
    // An operator's base spec with a credential in the environment, next to rlimits.
    let spec = include_str!("../../src/concerns/containerd/default-spec.json").replacen(
        "        \"rlimits\": [],",
        "        \"env\": [\"PATH=/usr/bin\", \"REGISTRY_TOKEN=PLANTED-env\"],\n        \"rlimits\": [],",
        1,
    );
    fs::write(root.join("etc/containerd/cri-base.json"), spec).unwrap();
    // A drop-in the agent replaces: its old lines are shown as removed.
    let d = root.join("etc/systemd/system/containerd.service.d");
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("50-rdma-node-agent.conf"),
        "[Service]\nEnvironment=\"REGISTRY_PASSWORD=PLANTED-dropin\"\nEnvironment=HTTP_TOKEN=PLANTED-dropin\nLimitMEMLOCK=64K\n",
    )
    .unwrap();
}

fn assert_no_secret(channel: &str, text: &str) {
    for s in PLANTED {
        assert!(!text.contains(s), "{channel} shows {s}:\n{text}");
    }
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn secrets_never_leave_the_file() {
    let t = node("v100");
    plant_secrets(t.path());
    let before = snapshot(t.path());
    for args in [
        &["plan"][..],
        &["plan", "--json"],
        &["check", "--json"],
        &["check"],
    ] {
        let o = agent(t.path(), args);
        assert_no_secret(
            &format!("{args:?}"),
            &format!("{}{}", stdout(&o), stderr(&o)),
        );
        if args[0] == "plan" {
            // The diffs are there, with the edits, and the context masked.
            let out = stdout(&o);
            assert!(
                out.contains("base_runtime_spec") && out.contains("<redacted>"),
                "{out}"
            );
        }
    }
    for args in [
        &["apply", "--json"][..],
        &["revert", "--json"],
        &["apply"],
        &["revert"],
    ] {
        let o = agent(t.path(), args);
        assert_no_secret(
            &format!("{args:?}"),
            &format!("{}{}", stdout(&o), stderr(&o)),
        );
    }
    // Nothing lost: the secrets are still in the files, byte for byte.
    assert_eq!(snapshot(t.path()), before);

    // The daemon: its logs (what journald gets) and every endpoint.
    let addr = free_addr();
    let d = Daemon::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
            .arg("--root")
            .arg(t.path())
            .args(["serve", "--listen", &addr])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    let start = std::time::Instant::now();
    let status = loop {
        assert!(start.elapsed().as_secs() < 20, "the daemon did not answer");
        if std::net::TcpStream::connect(&addr).is_ok() {
            let body = http_get(&addr, "/status");
            if body.contains(" 200 OK") {
                break body;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_no_secret("/status", &status);
    for p in ["/readyz", "/metrics", "/healthz"] {
        assert_no_secret(p, &http_get(&addr, p));
    }
    let out = d.stop();
    assert_no_secret(
        "the daemon's log",
        &format!("{}{}", stdout_of(&out.stdout), stdout_of(&out.stderr)),
    );
    // The agent's journal holds paths and reasons only.
    let journal = fs::read_to_string(t.path().join(STATE).join("journal.jsonl")).unwrap();
    assert_no_secret("journal.jsonl", &journal);
}

/// A syntax error in a line holding a credential: the error names the place,
/// never the value. (A guard: the code before this work did not quote it either.)
#[test]
fn a_broken_line_with_a_secret_is_not_quoted() {
    let t = node("v100");
    let cfg = t.path().join(CONFIG);
    let text = fs::read_to_string(&cfg).unwrap() + "password = \"PLANTED-password\" oops\n";
    fs::write(&cfg, text).unwrap();
    for args in [&["plan"][..], &["check", "--json"], &["apply"]] {
        let o = agent(t.path(), args);
        assert_no_secret(
            &format!("{args:?}"),
            &format!("{}{}", stdout(&o), stderr(&o)),
        );
    }
}
