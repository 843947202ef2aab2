//! Crash consistency: `apply` killed with SIGKILL at many points leaves every file
//! it owns either as it was or as it should be, never partial, and the next
//! `apply` converges. The kills race a real apply at spread-out delays.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use support::*;

const OWNED: &[&str] = &[
    "/etc/containerd/config.toml",
    "/etc/containerd/rdma-node-agent/base-spec.json",
    "/etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf",
];

fn contents(root: &Path) -> Vec<Option<Vec<u8>>> {
    OWNED
        .iter()
        .map(|p| std::fs::read(root.join(p.trim_start_matches('/'))).ok())
        .collect()
}

#[test]
fn sigkill_during_apply_leaves_old_or_new_files_and_the_next_apply_converges() {
    // The converged state of the fixture, to compare against.
    let reference = node("v100");
    let old = contents(reference.path());
    assert_eq!(agent(reference.path(), &["apply"]).status.code(), Some(0));
    let new = contents(reference.path());

    // How long one apply takes here, so the kills spread over all of it.
    let t = node("v100");
    let start = Instant::now();
    agent(t.path(), &["apply"]);
    let full = start.elapsed();
    println!("one apply: {full:?}");

    let mut interrupted = 0;
    for i in 0..60u32 {
        let t = node("v100");
        let mut child = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
            .arg("--root")
            .arg(t.path())
            .arg("apply")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(full * i / 50);
        let _ = child.kill();
        let status = child.wait().unwrap();
        if status.code().is_none() {
            interrupted += 1;
        }
        for (k, now) in contents(t.path()).iter().enumerate() {
            assert!(
                *now == old[k] || *now == new[k],
                "kill #{i}: {} is neither the old nor the new version",
                OWNED[k]
            );
        }
        let o = agent(t.path(), &["apply"]);
        assert_eq!(o.status.code(), Some(0), "kill #{i}: {}", stderr(&o));
        assert_eq!(contents(t.path()), new, "kill #{i}: did not converge");
        assert_eq!(
            agent(t.path(), &["plan", "--exit-code"]).status.code(),
            Some(0)
        );
        for dir in ["etc/containerd", "etc/containerd/rdma-node-agent"] {
            for e in std::fs::read_dir(t.path().join(dir)).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                assert!(
                    !name.contains(".rdma-node-agent."),
                    "kill #{i}: temp file {name} left"
                );
            }
        }
        // Revert after a crash still restores the originals.
        assert_eq!(agent(t.path(), &["revert"]).status.code(), Some(0));
        assert_eq!(contents(t.path()), old, "kill #{i}: revert after the crash");
    }
    println!("{interrupted} of 60 applies were killed before they finished");
    assert!(interrupted > 10, "the kills must really interrupt applies");
}
