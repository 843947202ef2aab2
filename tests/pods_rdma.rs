//! `pods.rdma` on real processes, observed through the real /proc: processes
//! started here with and without CAP_IPC_LOCK (setpriv, capsh) and with a
//! lowered memlock (prlimit), placed in kubepods cgroups as the kubelet places
//! containers, each holding (or having) a device node that stands in for uverbs.
//!
//! This machine has no /dev/infiniband (no RDMA in its kernel), and a real
//! uverbs node (char 231:192) cannot be opened without its driver. So each
//! process gets a private mount namespace with a tmpfs on /dev holding
//! `/dev/infiniband/uverbs0` as char 1:3 (the numbers of /dev/null): it opens
//! like any device, and /proc/<pid>/fd shows `/dev/infiniband/uverbs0`, the
//! path a container given the device by a device plugin shows. The agent knows
//! RDMA devices by that path (and by major 231 in a devices cgroup), so what it
//! reads here is exactly what it reads on an RDMA node. Nothing is created in
//! the host's /dev.

mod support;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdma_node_agent::concerns::readiness::pods_rdma;
use rdma_node_agent::host::Host;
use rdma_node_agent::host::snapshot::Snapshot;
use serde_json::Value;
use support::*;

/// Processes and cgroups of one test, removed (by PID) however it ends.
struct Pods {
    children: Vec<Child>,
    cgroups: Vec<PathBuf>,
    tag: String,
}

impl Drop for Pods {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for dir in self.cgroups.iter().rev() {
            // A cgroup can be removed once its processes are gone.
            for _ in 0..50 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Pods {
    fn new() -> Pods {
        Pods {
            children: Vec::new(),
            cgroups: Vec::new(),
            tag: format!("rdmatest{}", std::process::id()),
        }
    }

    /// A 64-hex container id unique to this test run.
    fn container_id(&self, n: u32) -> String {
        format!("{:0>56}{n:08x}", format!("{:x}", std::process::id()))
    }

    /// Starts `script` under sh in a private mount namespace whose /dev is a tmpfs
    /// holding the given stand-in device nodes, moves it into the cgroup of pod
    /// `pod` / container `n` (kubelet's cgroupfs layout) and returns its PID once
    /// it holds what the script opens.
    fn start(
        &mut self,
        pod: &str,
        n: u32,
        nodes: &[&str],
        wrap: &[&str],
        script: &str,
    ) -> (u32, String) {
        let id = self.container_id(n);
        let mut setup = String::from(
            "mount -t tmpfs none /dev && mknod /dev/null c 1 3 && mkdir /dev/infiniband",
        );
        for node in nodes {
            setup.push_str(&format!(" && mknod -m 666 /dev/infiniband/{node} c 1 3"));
        }
        let wrapped = wrap
            .iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ");
        // capsh runs bash with what follows its `--`.
        let shell = if wrap.last() == Some(&"--") {
            ""
        } else {
            "sh "
        };
        let inner = format!("{setup} && exec {wrapped} {shell}-c '{script}'");
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &inner])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        let rel = format!("kubepods/besteffort/pod{pod}-{}/{id}", self.tag);
        for controller in ["pids", "devices"] {
            let dir = Path::new("/sys/fs/cgroup").join(controller).join(&rel);
            fs::create_dir_all(&dir).unwrap();
            // Removed deepest first: the container, then the pod.
            self.cgroups.push(dir.parent().unwrap().to_owned());
            self.cgroups.push(dir.clone());
            fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        }
        // Wait until the final program runs (sleep), its descriptors in place.
        let start = Instant::now();
        while fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim()
            != "sleep"
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "pid {pid} never reached sleep"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        (pid, id)
    }

    fn devices_cgroup(&self, pod: &str, id: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup/devices")
            .join(format!("kubepods/besteffort/pod{pod}-{}/{id}", self.tag))
    }
}

fn require_root() {
    assert!(
        fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap()
            == 0,
        "needs root: run via scripts/test.sh"
    );
}

/// A root whose /proc and /sys are the machine's, with the given agent config.
fn host_root(config: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    symlink("/proc", t.path().join("proc")).unwrap();
    symlink("/sys", t.path().join("sys")).unwrap();
    write(t.path(), "/etc/rdma-node-agent/config.toml", config);
    t
}

fn finding<'a>(check: &'a Value, id: &str) -> Option<&'a Value> {
    check["details"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["container_id"] == id)
}

#[test]
#[ignore = "needs root: run via scripts/test.sh"]
fn real_processes_with_and_without_ipc_lock() {
    require_root();
    let mut pods = Pods::new();
    let no_ipc_lock = [
        "setpriv",
        "--inh-caps=-ipc_lock",
        "--bounding-set=-ipc_lock",
    ];
    // A: opens uverbs0, no CAP_IPC_LOCK, memlock lowered to 64 KiB.
    let mut a_wrap = vec!["prlimit", "--memlock=65536:65536"];
    a_wrap.extend(no_ipc_lock);
    let (a_pid, a) = pods.start(
        "a",
        1,
        &["uverbs0"],
        &a_wrap,
        "exec 3<>/dev/infiniband/uverbs0; exec sleep 600",
    );
    // B: opens rdma_cm with CAP_IPC_LOCK (root's), memlock 64 KiB: the kernel lets it
    // register memory anyway.
    let (_, b) = pods.start(
        "b",
        2,
        &["rdma_cm"],
        &["prlimit", "--memlock=65536:65536"],
        "exec 3<>/dev/infiniband/rdma_cm; exec sleep 600",
    );
    // C: has uverbs1 in its /dev but has not opened it; no CAP_IPC_LOCK (capsh).
    let (_, c) = pods.start(
        "c",
        3,
        &["uverbs1"],
        &["capsh", "--drop=cap_ipc_lock", "--"],
        "exec sleep 600",
    );
    // D: nothing in /dev, but its devices cgroup allows uverbs0 (231:192) only.
    let (_, d) = pods.start("d", 4, &[], &no_ipc_lock, "exec sleep 600");
    let cg = pods.devices_cgroup("d", &d);
    fs::write(cg.join("devices.deny"), "a").unwrap();
    fs::write(cg.join("devices.allow"), "c 231:192 rw").unwrap();
    // E: an ordinary pod process, no RDMA at all.
    let (_, e) = pods.start("e", 5, &[], &no_ipc_lock, "exec sleep 600");
    // F: a container running as uid 1000 holding uverbs0, memlock 64 KiB. A
    // non-root process has no effective capability after exec (setpriv's uid
    // change, like runc's, leaves no ambient set): IPC_LOCK cannot help it.
    let (f_pid, f) = pods.start(
        "f",
        6,
        &["uverbs0"],
        &[
            "prlimit",
            "--memlock=65536:65536",
            "setpriv",
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
        ],
        "exec 3<>/dev/infiniband/uverbs0; exec sleep 600",
    );

    let root = host_root("");
    let o = agent(root.path(), &["check", "--only", "pods.rdma", "--json"]);
    let report = json(&o);
    let check = &report["checks"][0];
    assert_eq!(check["id"], "pods.rdma");
    assert_eq!(check["status"], "warn", "{check}");
    assert_eq!(o.status.code(), Some(0), "a warning is not a failure (NPD)");

    let fa = finding(check, &a).unwrap_or_else(|| panic!("A not found: {check}"));
    assert_eq!(
        fa["problems"],
        serde_json::json!(["no_ipc_lock", "low_memlock"]),
        "{fa}"
    );
    assert_eq!(fa["evidence"], "opens /dev/infiniband/uverbs0");
    assert_eq!(fa["process"]["pid"], a_pid);
    assert_eq!(fa["process"]["memlock_soft"], "64KiB");
    // CapEff as /proc shows it: this machine's full set without bit 14.
    let caps = u64::from_str_radix(fa["process"]["cap_eff"].as_str().unwrap(), 16).unwrap();
    assert_eq!(caps & (1 << 14), 0, "{fa}");
    assert_ne!(caps, 0, "{fa}");
    assert_eq!(fa["pod_uid"], format!("a-{}", pods.tag));
    let msg = check["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "pod a-{} container {} (sleep, pid {a_pid}) opens /dev/infiniband/uverbs0 but lacks CAP_IPC_LOCK \
             and its memlock 64KiB (hard 64KiB) is below unlimited: ibv_reg_mr fails (\"Couldn't allocate \
             MR\") past it; either remedy works, as it runs as root",
            pods.tag,
            &a[..12]
        )),
        "{msg}"
    );

    let fb = finding(check, &b).unwrap_or_else(|| panic!("B not found: {check}"));
    assert_eq!(fb["problems"], serde_json::json!([]), "{fb}");
    assert_eq!(fb["evidence"], "opens /dev/infiniband/rdma_cm");

    let fc = finding(check, &c).unwrap_or_else(|| panic!("C not found: {check}"));
    assert_eq!(
        fc["evidence"], "has /dev/infiniband/uverbs1 in its /dev",
        "{fc}"
    );
    assert!(
        fc["problems"]
            .as_array()
            .unwrap()
            .contains(&Value::from("no_ipc_lock")),
        "{fc}"
    );

    let fd = finding(check, &d).unwrap_or_else(|| panic!("D not found: {check}"));
    assert_eq!(
        fd["evidence"], "its devices cgroup allows uverbs (c 231:192)",
        "{fd}"
    );

    assert!(
        finding(check, &e).is_none(),
        "E has no RDMA device: {check}"
    );

    let ff = finding(check, &f).unwrap_or_else(|| panic!("F not found: {check}"));
    assert_eq!(ff["evidence"], "opens /dev/infiniband/uverbs0", "{ff}");
    assert_eq!(ff["process"]["uid"], 1000, "{ff}");
    assert_eq!(ff["process"]["cap_eff"], "0000000000000000", "{ff}");
    assert_eq!(ff["problems"], serde_json::json!(["low_memlock"]), "{ff}");
    assert_eq!(ff["remedy"], "node_memlock_non_root", "{ff}");
    assert!(
        msg.contains(&format!(
            "pod f-{} container {} (sleep, pid {f_pid}) opens /dev/infiniband/uverbs0 but its memlock \
             64KiB (hard 64KiB) is below unlimited: ibv_reg_mr fails (\"Couldn't allocate MR\") past it; \
             it runs as uid 1000, not root, so IPC_LOCK in securityContext.capabilities.add gives it no \
             effective capability",
            pods.tag,
            &f[..12]
        )),
        "{msg}"
    );
    // The report says how the users were found: no uverbs device on this
    // machine, so no process can hold one and only the containers whose own
    // /dev or devices cgroup has RDMA nodes had their descriptors read (E's were not).
    // Every RDMA container above is still found (the device route).
    assert_eq!(check["details"]["found_by"]["by"], "no_uverbs", "{check}");
    // Under --root the pods come from each process's own cgroup (the tree's
    // /sys is a link to the host's, which the cgroup walk does not follow).
    assert_eq!(
        check["details"]["pods_from"],
        serde_json::json!({"by": "process_cgroups"}),
        "{check}"
    );
    // On the live root, from the kubelet's tree (each container's cgroup.procs,
    // the v1 devices hierarchy here): the same containers with the same processes.
    let ours = |f: &pods_rdma::Facts| -> Vec<(String, Vec<u32>)> {
        f.containers
            .iter()
            .filter(|c| c.pod_uid.as_deref().is_some_and(|u| u.ends_with(&pods.tag)))
            .map(|c| {
                let pids = c.processes.iter().map(|p| p.pid).collect();
                (c.pod_uid.clone().unwrap(), pids)
            })
            .collect()
    };
    let live = pods_rdma::gather(&Snapshot::new(Host::new("/"))).unwrap();
    assert_eq!(
        live.pods_from,
        pods_rdma::PodsFrom::CgroupTree {
            at: "/sys/fs/cgroup/devices/kubepods".into()
        }
    );
    let by_process = pods_rdma::gather(&Snapshot::new(Host::new(root.path()))).unwrap();
    assert_eq!(by_process.pods_from, pods_rdma::PodsFrom::ProcessCgroups);
    assert_eq!(ours(&live).len(), pods.children.len(), "{:?}", ours(&live));
    assert_eq!(ours(&live), ours(&by_process));

    // With only the service's capabilities (CAP_SYS_PTRACE, CAP_NET_ADMIN: no
    // CAP_DAC_READ_SEARCH) the descriptors of F, a uid-1000 process, cannot be
    // listed; its /dev can (through /proc/<pid>/root), so F is still named.
    let o = Command::new("setpriv")
        .args(["--bounding-set=-all,+sys_ptrace,+net_admin", "--"])
        .arg(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root.path())
        .args(["check", "--only", "pods.rdma", "--json"])
        .output()
        .unwrap();
    let report = json(&o);
    let check = &report["checks"][0];
    let ff = finding(check, &f).unwrap_or_else(|| panic!("F not found as the service: {check}"));
    assert_eq!(
        ff["evidence"], "has /dev/infiniband/uverbs0 in its /dev",
        "{ff}"
    );
    assert!(ff["process"]["fds_unreadable"].is_string(), "{ff}");
    assert_eq!(ff["problems"], serde_json::json!(["low_memlock"]), "{ff}");
    assert_eq!(ff["remedy"], "node_memlock_non_root", "{ff}");
    let fa = finding(check, &a).unwrap();
    assert_eq!(
        fa["evidence"], "opens /dev/infiniband/uverbs0",
        "root's fds stay readable: {fa}"
    );

    // Configured to fail, the same finding fails the check (exit 1 for NPD).
    let root = host_root("[pods]\nrdma = \"fail\"\n");
    let o = agent(root.path(), &["check", "--only", "pods.rdma"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}

/// The bundled V100 sample node: `check` shows pods.rdma (its ib_write_bw pod
/// lacks CAP_IPC_LOCK and runs with 64 KiB) and the kubelet cross-check, in
/// both directions when the node is changed.
#[test]
fn sample_node_shows_rdma_pods_and_the_kubelet() {
    let t = node("v100");
    let o = agent(t.path(), &["check"]);
    let text = stdout(&o);
    assert!(
        text.contains(
            "warn    pods.rdma            1 of 1 RDMA pod container(s) cannot register memory: \
             pod 6f1c2d3e-aaaa-bbbb-cccc-0123456789ab container 9a8b7c6d5e4f (ib_write_bw, pid 4301) \
             opens /dev/infiniband/uverbs0, /dev/infiniband/rdma_cm but lacks CAP_IPC_LOCK"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "ok      kubelet.devices      kubelet advertises nvidia.com/gpu: 2, rdma/hca: 8; \
             host: 2 of 2 RDMA port(s) ACTIVE; plugin sockets: nvidia-gpu.sock, rdma-hca.sock"
        ),
        "{text}"
    );
    let kubelet = |root: &Path| {
        let r = json(&agent(
            root,
            &["check", "--only", "kubelet.devices", "--json"],
        ));
        r["checks"][0].clone()
    };
    assert_eq!(kubelet(t.path())["details"]["checksum_ok"], true);

    // Both ports down: the kubelet still advertises rdma/hca.
    let down = node("v100");
    for dev in ["mlx5_0", "mlx5_1"] {
        let state = down
            .path()
            .join(format!("sys/class/infiniband/{dev}/ports/1/state"));
        let real = fs::canonicalize(&state).unwrap();
        fs::write(real, "1: DOWN\n").unwrap();
    }
    let c = kubelet(down.path());
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["message"].as_str().unwrap().starts_with(
            "the kubelet advertises rdma/hca (8 devices) but every RDMA port of the host is down \
             (mlx5_0/1, mlx5_1/1): RDMA pods will be scheduled here and fail"
        ),
        "{c}"
    );

    // The device plugin gone: the checkpoint no longer lists rdma/hca.
    let gone = node("v100");
    let dir = gone.path().join("var/lib/kubelet/device-plugins");
    fs::write(
        dir.join("kubelet_internal_checkpoint"),
        include_str!("fixtures/kubelet/gpuops-t4.json"),
    )
    .unwrap();
    fs::remove_file(dir.join("rdma-hca.sock")).unwrap();
    let c = kubelet(gone.path());
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["message"].as_str().unwrap().starts_with(
            "the host has 2 ACTIVE RDMA port(s) but the kubelet advertises no rdma/* device: \
             the device plugin is not running"
        ),
        "{c}"
    );

    // No kubelet at all.
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(kubelet(gone.path())["status"], "skipped");
}
