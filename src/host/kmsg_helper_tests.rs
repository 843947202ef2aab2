use std::fs;

use super::*;
use crate::host::pci_helper::testing::InProcess;

const LOG: &str = "\
3,100,5000,-;mlx5_core 0000:41:00.0: poll_health:1:(pid 0): device's health compromised - reached miss count
 SUBSYSTEM=pci
 DEVICE=+pci:0000:41:00.0
6,101,5001,-;bnxt_en 0000:03:00.0: link up
11,102,5002,-;mlx5_core 0000:41:00.0: poll_health:1:(pid 0): device's health compromised - reached miss count
3,103,5003,-;mlx5_core 0000:41:00.0: wait_func:1:(pid 7): cmd timeout
";

const CAPS: Caps = Caps {
    max_bytes: 1 << 20,
    max_records: 1000,
};

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir_all(t.path().join("dev")).unwrap();
    fs::write(t.path().join("dev/kmsg"), LOG).unwrap();
    t
}

fn words(w: &[&str]) -> Vec<String> {
    ["rdma-node-agent", "kernel-log"]
        .iter()
        .chain(w)
        .map(|s| (*s).to_owned())
        .collect()
}

#[test]
fn the_helper_keeps_the_kernels_own_records_of_the_prefix_only() {
    let t = tree();
    let host = Host::new(t.path());
    let argv = words(&[
        "--token",
        "abc1",
        "--prefix",
        "mlx5_core ",
        "--after",
        "100",
        "--max-bytes",
        "65536",
        "--max-records",
        "100",
    ]);
    execute_words(&host, &host, &argv).unwrap();
    let bytes = fs::read(t.path().join("run/rdma-node-agent/kernel-log/abc1.json")).unwrap();
    let answer: Answer = serde_json::from_slice(&bytes).unwrap();
    let log = answer.result.unwrap();
    // 100 is not after 100; 101 is another driver's; 102 is facility 1
    // (LOG_USER: written into /dev/kmsg from userspace, not the kernel's).
    let seqs: Vec<u64> = log.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [103]);
    assert_eq!((log.first_seq, log.last_seq), (Some(100), Some(103)));
}

#[test]
fn bad_arguments_are_refused_and_write_nothing() {
    let t = tree();
    let host = Host::new(t.path());
    for (w, says) in [
        (["--token", "../x", "--prefix", "mlx5_core "], "--token"),
        (["--token", "ab", "--prefix", ""], "--prefix"),
        (["--token", "ab", "--prefix", "mlx5\ncore"], "--prefix"),
    ] {
        let mut w = w.to_vec();
        w.extend(["--max-bytes", "10", "--max-records", "10"]);
        let e = execute_words(&host, &host, &words(&w)).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
    assert!(!t.path().join("run").exists());
}

#[test]
fn the_daemon_reads_through_the_helper_and_leaves_no_answer_behind() {
    let t = tree();
    let m = InProcess::new(t.path(), t.path());
    let host = ReadHost::new(Host::new(t.path()));
    let log = through_helper(&m, &host, Some(100), "mlx5_core ", CAPS).unwrap();
    assert_eq!(log.records.len(), 1);
    assert_eq!(log.records[0].device, None);
    let runs = m.runs();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].contains("--after 100"), "{runs:?}");
    let dir = t.path().join("run/rdma-node-agent/kernel-log");
    assert_eq!(fs::read_dir(dir).unwrap().count(), 0);
}

#[test]
fn a_log_the_helper_cannot_read_is_its_error_not_an_empty_log() {
    let t = tree();
    fs::remove_file(t.path().join("dev/kmsg")).unwrap();
    fs::create_dir(t.path().join("dev/kmsg")).unwrap();
    let m = InProcess::new(t.path(), t.path());
    let host = ReadHost::new(Host::new(t.path()));
    let e = through_helper(&m, &host, None, "mlx5_core ", CAPS).unwrap_err();
    assert!(matches!(e, KmsgError::Helper { .. }), "{e}");
    assert!(e.to_string().contains("kernel-log helper"), "{e}");
}

#[test]
fn a_tree_is_read_directly_even_when_the_helper_is_allowed() {
    let t = tree();
    let m = InProcess::new(t.path(), t.path());
    let host = ReadHost::new(Host::new(t.path()));
    let log = read_with(&host, Some(&m), true, None, "mlx5_core ", CAPS).unwrap();
    assert_eq!(log.records.len(), 2);
    assert!(m.runs().is_empty());
}
