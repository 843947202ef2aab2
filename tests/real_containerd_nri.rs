//! `memlock_via = "nri"` on the real containerd 2.1 (scripts/fetch-containerd.sh)
//! with runc over CRI: the daemon registers as an NRI plugin and raises
//! RLIMIT_MEMLOCK only for containers given /dev/infiniband/uverbs0 (a CRI
//! `Device`, as a device plugin's Allocate answer has the kubelet ask; the host
//! has no uverbs, so the node is the host's /dev/null under that name), with
//! no containerd restart and containerd's config and base spec untouched; it
//! registers again after containerd restarts; once the agent stops, the next
//! RDMA container is no longer adjusted.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_cri::v1::{CdiDevice, ContainerConfig, Device};
use serde_json::Value;
use support::cri::Containerd;
use support::nri_daemon::NriDaemon;
use support::*;

// Below the hard limit this sandbox gives containerd (8 MiB): runc raising a
// hard limit needs CAP_SYS_RESOURCE, which root lacks here (not on a node).
const TARGET: u64 = 4 << 20;
/// An operator's explicit lower limit, in a handler's base spec.
const LOWER: u64 = 1 << 20;
const SOCKET: &str = "/run/nri/nri.sock";
/// An RDMA container's process: it holds the device open, as verbs do.
const HOLD: &str = "exec 3<>/dev/infiniband/uverbs0; exec sleep 600";
/// How long the plugin may take to register.
const REGISTERED: Duration = Duration::from_secs(30);

fn containerd_21() -> PathBuf {
    let cache = std::env::var_os("RDMA_AGENT_CONTAINERD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/rdma-node-agent/containerd".into());
    let p = cache.join("2.1/containerd");
    assert!(
        p.exists(),
        "no containerd 2.1 at {}: run scripts/fetch-containerd.sh (scripts/test.sh does)",
        p.display()
    );
    p
}

fn uverbs(cfg: &mut ContainerConfig) {
    cfg.devices.push(Device {
        container_path: "/dev/infiniband/uverbs0".into(),
        host_path: "/dev/null".into(),
        permissions: "rw".into(),
    });
}

/// (soft, hard) of "Max locked memory" in /proc/<pid>/limits, in bytes
/// (`u64::MAX` for unlimited).
fn memlock(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap_or_else(|| panic!("no memlock line in /proc/{pid}/limits:\n{text}"));
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .take(2)
        .map(|f| {
            if f == "unlimited" {
                u64::MAX
            } else {
                f.parse().unwrap()
            }
        })
        .collect();
    (v[0], v[1])
}

#[test]
#[ignore = "needs root and containerd 2.1: run via scripts/test.sh"]
fn nri_raises_memlock_only_for_rdma_containers_without_a_restart() {
    let binary = containerd_21();
    let mut c = Containerd::with_binary(&binary);
    let root = c.root();
    // NRI as containerd 2.x has it by default, its socket inside the test's tree.
    let config = root.join("etc/containerd/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&support::cri::nri_toml(
        &root.join(SOCKET.trim_start_matches('/')),
    ));
    // CDI, as device plugins that return CDI names use it: a spec in the test's
    // own directory whose device node is /dev/infiniband/uverbs1 (on /dev/null).
    let cdi = c.dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    std::fs::write(
        cdi.join("rdma-test.json"),
        serde_json::to_vec(&serde_json::json!({
            "cdiVersion": "0.6.0",
            "kind": "rdma-node-agent.test/hca",
            "devices": [{"name": "0", "containerEdits": {"deviceNodes": [
                {"path": "/dev/infiniband/uverbs1", "hostPath": "/dev/null"}
            ]}}]
        }))
        .unwrap(),
    )
    .unwrap();
    let cri = "  restrict_oom_score_adj = true\n";
    assert!(text.contains(cri), "{text}");
    text = text.replace(
        cri,
        &format!(
            "{cri}  enable_cdi = true\n  cdi_spec_dirs = [\"{}\"]\n",
            cdi.display()
        ),
    );
    // The `control` handler gets an operator's base spec with a lower memlock
    // (1 MiB). containerd 2.1 applies it but shows NRI plugins no rlimits (and
    // appends an adjustment after it), so the agent reads the handler's base
    // spec itself. Its path is the one containerd sees through the test's bind
    // mount, and the agent under its root.
    let lower = root.join("etc/containerd/lower-memlock.json");
    let mut spec: Value =
        serde_json::from_str(include_str!("../src/concerns/containerd/default-spec.json")).unwrap();
    spec["process"]["rlimits"] =
        serde_json::json!([{"type": "RLIMIT_MEMLOCK", "hard": LOWER, "soft": LOWER}]);
    std::fs::write(&lower, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let control = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.control]\n      runtime_type = \"io.containerd.runc.v2\"\n";
    assert!(text.contains(control), "{text}");
    text = text.replace(
        control,
        &format!("{control}      base_runtime_spec = \"/etc/containerd/lower-memlock.json\"\n"),
    );
    std::fs::write(&config, &text).unwrap();
    write(
        &root,
        "/etc/rdma-node-agent/config.toml",
        &format!(
            "[containerd]\nmemlock_via = \"nri\"\nmemlock = \"4MiB\"\nnri_socket = \"{SOCKET}\"\nbinary = \"{}\"\n\
             [systemd]\nenabled = false\n[daemon]\ninterval_secs = 1\n",
            binary.display()
        ),
    );
    c.start();
    let containerd_pid = c.pid().unwrap();
    let default = memlock(containerd_pid);
    assert_ne!(
        default.0, TARGET,
        "containerd itself already has the target"
    );
    let before = snapshot(&root.join("etc/containerd"));

    let mut agent = NriDaemon::start(
        Path::new(env!("CARGO_BIN_EXE_rdma-node-agent")),
        &root,
        c.dir.path().join("agent.log"),
    );
    let check = agent.wait_registered(1, REGISTERED);
    assert_eq!(check["status"], "ok", "{check}");
    // `check` from a shell (node-problem-detector's) reads what the daemon published.
    let shell = check_in(
        &json(&support::agent(
            &root,
            &["check", "--json", "--only", "containerd.nri"],
        )),
        "containerd.nri",
    );
    assert_eq!(shell["status"], "ok", "{shell}");
    assert!(
        shell["message"].as_str().unwrap().contains("daemon pid"),
        "{shell}"
    );

    // (a) an RDMA container gets the target, soft and hard, with no restart.
    let rdma = c.running_with("nri-rdma", "runc", HOLD, uverbs);
    assert_eq!(
        memlock(rdma.pid),
        (TARGET, TARGET),
        "--- agent log ---\n{}",
        agent.log()
    );
    // A device given by CDI name reaches NRI as a linux device too.
    let by_cdi = c.running_with("nri-cdi", "runc", "exec sleep 600", |cfg| {
        cfg.cdi_devices.push(CdiDevice {
            name: "rdma-node-agent.test/hca=0".into(),
        });
    });
    assert_eq!(
        memlock(by_cdi.pid),
        (TARGET, TARGET),
        "--- agent log ---\n{}",
        agent.log()
    );
    // (b) a container without RDMA devices keeps the runtime default.
    let plain = c.running("nri-plain", "runc", "exec sleep 600");
    assert_eq!(memlock(plain.pid), default);
    assert_eq!(c.pid(), Some(containerd_pid), "containerd was restarted");
    assert_eq!(
        snapshot(&root.join("etc/containerd")),
        before,
        "containerd's config or base spec changed"
    );
    assert!(
        !root
            .join("etc/containerd/rdma-node-agent/base-spec.json")
            .exists()
    );
    // /metrics shows the reconcile after the container (interval 1 s).
    let start = Instant::now();
    let metrics = loop {
        let m = agent.get("/metrics").unwrap_or_default();
        if m.contains("rdma_node_agent_nri_adjusted_containers_total 2\n")
            || start.elapsed() > Duration::from_secs(15)
        {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        metrics.contains("rdma_node_agent_nri_registered 1\n")
            && metrics.contains("rdma_node_agent_nri_adjusted_containers_total 2\n"),
        "{metrics}"
    );

    // An RDMA container whose spec already has a lower explicit memlock keeps
    // it: not raised silently, but counted and logged.
    let kept = c.running_with("nri-lower", "control", "exec sleep 600", uverbs);
    assert_eq!(memlock(kept.pid), (LOWER, LOWER));
    let start = Instant::now();
    while agent
        .nri_check()
        .map(|c| c["details"]["kept_lower"].clone())
        != Some(1.into())
    {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the kept lower limit was not reported: {:?}",
            agent.nri_check()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        agent
            .log()
            .contains("explicit RLIMIT_MEMLOCK soft 1048576 hard 1048576"),
        "{}",
        agent.log()
    );

    // (c) containerd restarts: the plugin registers again, and the next RDMA
    // container is adjusted.
    c.restart();
    agent.wait_registered(2, REGISTERED);
    let again = c.running_with("nri-rdma-2", "runc", HOLD, uverbs);
    assert_eq!(memlock(again.pid), (TARGET, TARGET), "{}", agent.log());

    // (d) the agent stops: the next RDMA container is not adjusted, and
    // `check` says the plugin is gone instead of the last published ok.
    agent.stop();
    let shell = check_in(
        &json(&support::agent(
            &root,
            &["check", "--json", "--only", "containerd.nri"],
        )),
        "containerd.nri",
    );
    assert_eq!(shell["status"], "fail", "{shell}");
    assert!(
        shell["message"]
            .as_str()
            .unwrap()
            .contains("no longer running"),
        "{shell}"
    );
    let unadjusted = c.running_with("nri-rdma-3", "runc", HOLD, uverbs);
    assert_eq!(memlock(unadjusted.pid), memlock(c.pid().unwrap()));
    assert_ne!(memlock(unadjusted.pid).0, TARGET);

    // The agent is back: it registers again (it survives its own restart),
    // the next RDMA container is adjusted, and pods.rdma names the one created
    // while it was down (and not the adjusted ones).
    let agent = NriDaemon::start(
        Path::new(env!("CARGO_BIN_EXE_rdma-node-agent")),
        &root,
        c.dir.path().join("agent-2.log"),
    );
    agent.wait_registered(1, REGISTERED);
    let after = c.running_with("nri-rdma-4", "runc", HOLD, uverbs);
    assert_eq!(memlock(after.pid), (TARGET, TARGET), "{}", agent.log());
    let report = json(&support::agent(
        &root,
        &["check", "--json", "--only", "pods.rdma"],
    ));
    let pods = check_in(&report, "pods.rdma");
    let containers = pods["details"]["containers"].as_array().unwrap();
    // Its memlock problems (the capability advice is pods.rdma's own business).
    let memlock_problems = |id: &str| {
        containers
            .iter()
            .find(|x| x["container_id"] == id)
            .map(|x| {
                x["problems"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p.as_str().unwrap().contains("memlock"))
                    .count()
            })
    };
    assert!(
        memlock_problems(&unadjusted.id).is_some_and(|n| n > 0),
        "the container created while the agent was down is not named for its memlock: {pods}"
    );
    for ok in [&rdma.id, &again.id, &after.id] {
        assert_eq!(memlock_problems(ok), Some(0), "{ok}: {pods}");
    }
}

#[test]
#[ignore = "needs root and containerd 2.1: run via scripts/test.sh"]
fn nri_alone_fails_the_check_when_containerd_has_nri_disabled() {
    let mut c = Containerd::with_binary(&containerd_21());
    let root = c.root();
    let config = root.join("etc/containerd/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n");
    std::fs::write(&config, &text).unwrap();
    write(
        &root,
        "/etc/rdma-node-agent/config.toml",
        &format!(
            "[containerd]\nmemlock_via = \"nri\"\nnri_socket = \"{SOCKET}\"\n[systemd]\nenabled = false\n"
        ),
    );
    c.start();
    let report = json(&agent(&root, &["check", "--json"]));
    let check = check_in(&report, "containerd.nri");
    assert_eq!(check["status"], "fail", "{check}");
    let msg = check["message"].as_str().unwrap();
    assert!(
        msg.contains("disable = false") && msg.contains("memlock_via = \"base-spec\""),
        "{msg}"
    );
    // And the base spec is not planned instead.
    let memlock_check = check_in(&report, "containerd.memlock");
    assert_eq!(memlock_check["status"], "skipped", "{memlock_check}");

    // `auto` on the same containerd picks the base spec, and says so.
    write(
        &root,
        "/etc/rdma-node-agent/config.toml",
        &format!(
            "[containerd]\nmemlock_via = \"auto\"\nnri_socket = \"{SOCKET}\"\n[systemd]\nenabled = false\n"
        ),
    );
    let report = json(&agent(&root, &["check", "--json"]));
    let check = check_in(&report, "containerd.nri");
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .contains("picked the base spec"),
        "{check}"
    );
    let memlock_check = check_in(&report, "containerd.memlock");
    assert_ne!(memlock_check["status"], "skipped", "{memlock_check}");
    let plan = stdout(&agent(&root, &["plan"]));
    assert!(plan.contains("base_runtime_spec"), "{plan}");
}
