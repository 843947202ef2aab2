use std::fs;
use std::sync::Mutex;
use std::time::Duration;

use clap::Parser;

use super::*;
use crate::host::service::{SystemdError, UnitStatus};

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

#[derive(clap::Parser)]
struct Words {
    #[command(flatten)]
    args: Args,
}

fn args(words: &[&str]) -> Args {
    Words::try_parse_from(std::iter::once("kernel-log").chain(words.iter().copied()))
        .unwrap()
        .args
}

/// What the daemon sees: systemd runs the helper (here, in this process on
/// the tree) and the answer comes back through its directory.
struct InProcess {
    sys: Host,
    runs: Mutex<Vec<Vec<String>>>,
}

impl ServiceManager for InProcess {
    fn reload(&self) -> Result<(), SystemdError> {
        Ok(())
    }
    fn restart(&self, _: &str, _: Duration, _: &Stop) -> Result<(), SystemdError> {
        Ok(())
    }
    fn status(&self, unit: &str) -> Result<UnitStatus, SystemdError> {
        Err(SystemdError::Call {
            call: format!("status of {unit}"),
            message: "not in this test".into(),
        })
    }
    fn run_transient(
        &self,
        unit: &str,
        _: &[String],
        _: Duration,
        _: &Stop,
    ) -> Result<(), SystemdError> {
        panic!("{unit}: the kernel-log helper runs sandboxed, never as a plain transient unit")
    }
    fn run_kernel_log_helper(
        &self,
        unit: &str,
        argv: &[String],
        _: Duration,
        _: &Stop,
    ) -> Result<(), SystemdError> {
        assert!(unit.starts_with(UNIT_PREFIX), "{unit}");
        assert_eq!(argv[1], "kernel-log");
        self.runs.lock().unwrap().push(argv[1..].to_vec());
        let words: Vec<&str> = argv[2..].iter().map(String::as_str).collect();
        let host = ReadHost::new(self.sys.clone());
        execute(&host, &self.sys, &args(&words)).map_err(|e| SystemdError::JobFailed {
            unit: unit.to_owned(),
            job: "start",
            result: format!("failed ({e})"),
        })
    }
}

#[test]
fn the_helper_keeps_the_kernels_own_records_of_the_prefix_only() {
    let t = tree();
    let host = Host::new(t.path());
    let a = args(&[
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
    execute(&ReadHost::new(host.clone()), &host, &a).unwrap();
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
    for (words, says) in [
        (["--token", "../x", "--prefix", "mlx5_core "], "--token"),
        (["--token", "ab", "--prefix", ""], "--prefix"),
        (["--token", "ab", "--prefix", "mlx5\ncore"], "--prefix"),
    ] {
        let mut w = words.to_vec();
        w.extend(["--max-bytes", "10", "--max-records", "10"]);
        let e = execute(&ReadHost::new(host.clone()), &host, &args(&w)).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
    assert!(!t.path().join("run").exists());
}

#[test]
fn the_daemon_reads_through_the_helper_and_leaves_no_answer_behind() {
    let t = tree();
    let m = InProcess {
        sys: Host::new(t.path()),
        runs: Mutex::default(),
    };
    let host = ReadHost::new(Host::new(t.path()));
    let log = through_helper(&m, &host, Some(100), "mlx5_core ", CAPS).unwrap();
    assert_eq!(log.records.len(), 1);
    assert_eq!(log.records[0].device, None);
    let runs = m.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1);
    assert!(
        runs[0].windows(2).any(|w| w == ["--after", "100"]),
        "{runs:?}"
    );
    let dir = t.path().join("run/rdma-node-agent/kernel-log");
    assert_eq!(fs::read_dir(dir).unwrap().count(), 0);
}

#[test]
fn a_log_the_helper_cannot_read_is_its_error_not_an_empty_log() {
    let t = tree();
    fs::remove_file(t.path().join("dev/kmsg")).unwrap();
    fs::create_dir(t.path().join("dev/kmsg")).unwrap();
    let m = InProcess {
        sys: Host::new(t.path()),
        runs: Mutex::default(),
    };
    let host = ReadHost::new(Host::new(t.path()));
    let e = through_helper(&m, &host, None, "mlx5_core ", CAPS).unwrap_err();
    assert!(matches!(e, KmsgError::Helper { .. }), "{e}");
    assert!(e.to_string().contains("kernel-log helper"), "{e}");
}

#[test]
fn a_tree_is_read_directly_even_when_the_helper_is_allowed() {
    let t = tree();
    let m = InProcess {
        sys: Host::new(t.path()),
        runs: Mutex::default(),
    };
    let host = ReadHost::new(Host::new(t.path()));
    let log = read(&host, Some(&m), true, None, "mlx5_core ", CAPS).unwrap();
    assert_eq!(log.records.len(), 2);
    assert!(m.runs.lock().unwrap().is_empty());
}
