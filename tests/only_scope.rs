//! `check --only ID` gathers only what that check needs: proven on the system
//! calls of the real binary (strace), not on our own bookkeeping. On the V100
//! node with kernel modules installed, `--only rdma.devices` opens neither a
//! module nor the /proc listing nor any process's files, while a full check does
//! (the control: strace would see them).

mod support;

use std::path::Path;
use std::process::Command;

/// Every path the binary asked the kernel about (open, stat, readlink, ...),
/// with the exit code of the check.
fn traced(root: &Path, args: &[&str]) -> (Vec<String>, i32) {
    let log = tempfile::NamedTempFile::new().unwrap();
    // -y: a descriptor argument is shown with its path (`openat2(5</…/ports>,
    // "1/state", …)`), so a path relative to a directory is read whole.
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", "trace=%file", "-o"])
        .arg(log.path())
        .arg(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("strace (Debian package strace) is installed by scripts/test.sh");
    let code = out.status.code().expect("the check exited");
    let paths = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (head, rest) = l.split_once('"')?;
            let path = rest.split('"').next()?;
            let dir = head
                .rsplit_once('(')
                .and_then(|(_, a)| a.split_once('<'))
                .and_then(|(_, d)| d.split_once('>'))
                .map(|(d, _)| d);
            Some(match dir {
                Some(d) if !path.starts_with('/') => format!("{d}/{path}"),
                _ => path.to_owned(),
            })
        })
        .collect();
    (paths, code)
}

/// The V100 node with the running kernel's RDMA modules installed (compressed,
/// as Debian ships them): the files a full check's kernel concern decompresses.
fn node_with_modules() -> tempfile::TempDir {
    let t = support::node("v100");
    let dir = t
        .path()
        .join("lib/modules/6.1.0-49-amd64/kernel/drivers/infiniband");
    std::fs::create_dir_all(&dir).unwrap();
    for m in ["ib_core", "ib_uverbs", "mlx5_ib", "rdma_ucm"] {
        std::fs::write(dir.join(format!("{m}.ko.xz")), b"not read by --only").unwrap();
    }
    t
}

fn is_module(p: &str) -> bool {
    p.contains("lib/modules")
}

/// The /proc listing or a process's own files (`proc/<pid>/...`).
fn is_process_walk(p: &str) -> bool {
    let rel = p.trim_start_matches('/');
    let rel = rel.split_once("/proc").map_or(rel, |(_, r)| r);
    let rel = rel.trim_start_matches("proc").trim_start_matches('/');
    p.ends_with("/proc")
        || p == "proc"
        || rel
            .split('/')
            .next()
            .is_some_and(|first| !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()))
}

#[test]
#[ignore = "needs strace (Debian package strace): run via scripts/test.sh"]
fn only_rdma_devices_reads_no_module_and_walks_no_process() {
    let node = node_with_modules();
    let root = node.path();
    let rooted = |paths: &[String]| -> Vec<String> {
        // Only the node's files: the binary's own start-up (ld.so, locale) is not the check's.
        let r = root.to_string_lossy().into_owned();
        paths
            .iter()
            .filter(|p| p.starts_with(&r) || !p.starts_with('/'))
            .map(|p| p.strip_prefix(&r).unwrap_or(p).to_owned())
            .collect()
    };

    let (full, _) = traced(root, &["check", "--json"]);
    let full = rooted(&full);
    assert!(
        full.iter().any(|p| is_module(p)),
        "control: a full check reads the modules (else this test proves nothing): {full:?}"
    );
    assert!(
        full.iter().any(|p| is_process_walk(p)),
        "control: a full check walks /proc: {full:?}"
    );

    let (only, code) = traced(root, &["check", "--only", "rdma.devices", "--json"]);
    let only = rooted(&only);
    assert_eq!(code, 0, "rdma.devices is ok on the V100 node");
    let modules: Vec<&String> = only.iter().filter(|p| is_module(p)).collect();
    assert!(
        modules.is_empty(),
        "--only rdma.devices read modules: {modules:?}"
    );
    let procs: Vec<&String> = only.iter().filter(|p| is_process_walk(p)).collect();
    assert!(
        procs.is_empty(),
        "--only rdma.devices walked /proc: {procs:?}"
    );
    assert!(
        only.iter().any(|p| p.contains("infiniband")),
        "--only rdma.devices read the devices: {only:?}"
    );
    // And much less than the full check.
    assert!(
        only.len() * 2 < full.len(),
        "--only rdma.devices touched {} paths, the full check {}",
        only.len(),
        full.len()
    );
}

#[test]
fn process_walk_matcher() {
    for p in [
        "proc",
        "/proc",
        "proc/812/limits",
        "/proc/812/comm",
        "/x/proc/1",
    ] {
        assert!(is_process_walk(p), "{p}");
    }
    for p in [
        "proc/modules",
        "/proc/sys/kernel/osrelease",
        "sys/class/infiniband",
    ] {
        assert!(!is_process_walk(p), "{p}");
    }
}
