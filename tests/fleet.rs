//! The fleet view end to end: 200 agents on loopback, each `serve`-ing its own
//! `--root` tree (the V100 sample with a planted fault, tests/support/fleet.rs),
//! a real Prometheus (Debian's package) scraping them every second with the
//! fleet rules loaded, its API behind TLS and basic auth. `fleet` and the alerts
//! must name exactly the planted nodes and reasons; every expression of the
//! Grafana dashboard must run. Prints the figures docs/fleet.md quotes (run with
//! `--nocapture` to see them).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fleet::{Fault, plant, set_port, template};
use support::prometheus::{Credentials, Prometheus};

const NODES: usize = 200;

fn fault(i: usize) -> Fault {
    match i {
        17 | 63 | 141 => Fault::PortDown,
        23 | 88 | 150 | 199 => Fault::Firmware,
        42 | 120 => Fault::Mtu,
        77 => Fault::SlowPort,
        9 | 133 => Fault::Flapping,
        31 | 164 => Fault::CriDisabled,
        55 => Fault::Netns,
        66 => Fault::Memlock,
        111 => Fault::GpuDriver,
        12 | 190 => Fault::KubeletZero,
        101 => Fault::Mixed,
        180 => Fault::Gone,
        _ => Fault::Healthy,
    }
}

fn name(i: usize) -> String {
    format!("node-{i:03}")
}

/// The names of the nodes planted with any of `faults` (Mixed counts as each of its parts).
fn planted(faults: &[Fault]) -> BTreeSet<String> {
    (1..=NODES)
        .filter(|i| {
            let f = fault(*i);
            faults.contains(&f)
                || (f == Fault::Mixed
                    && faults.iter().any(|x| {
                        matches!(x, Fault::PortDown | Fault::Firmware | Fault::CriDisabled)
                    }))
        })
        .map(name)
        .collect()
}

/// One plain HTTP GET to an agent; the body of a 200.
fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    b.starts_with("HTTP/1.1 200")
        .then(|| b.split_once("\r\n\r\n").unwrap().1.to_owned())
}

/// Each agent's process; all stopped on drop.
struct Agents(Vec<Option<Child>>);

impl Drop for Agents {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
        }
        for c in self.0.iter_mut().flatten() {
            let _ = c.wait();
        }
    }
}

/// Each `serve` holds an inotify instance, and a user has 128 by default (as root,
/// every test of the suite shares them): raised for the test, put back after.
struct InotifyLimit(Option<String>);

const INOTIFY: &str = "/proc/sys/fs/inotify/max_user_instances";

impl InotifyLimit {
    fn raise(by: usize) -> InotifyLimit {
        let old = std::fs::read_to_string(INOTIFY).unwrap();
        let n: usize = old.trim().parse().unwrap();
        if n >= 4 * by {
            return InotifyLimit(None);
        }
        std::fs::write(INOTIFY, format!("{}\n", n + by + 64))
            .expect("raising fs.inotify.max_user_instances needs root: run scripts/test.sh");
        InotifyLimit(Some(old))
    }
}

impl Drop for InotifyLimit {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(INOTIFY, old);
        }
    }
}

fn serve(root: &Path, addr: &str, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root)
        .args(["serve", "--listen", addr])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Series (sample lines) in an exposition.
fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// `fleet` against the test's Prometheus, with the basic auth user and its
/// password file (`auth`) and the test CA (`ca`), and `extra` arguments.
fn fleet(
    p: &Prometheus,
    creds: &Credentials,
    auth: bool,
    ca: bool,
    extra: &[&str],
) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"));
    c.args(["fleet", "--prometheus", &p.url]);
    if auth {
        c.args([
            "--basic-auth-user",
            &creds.user,
            "--basic-auth-password-file",
        ])
        .arg(&creds.password_file);
    }
    if ca {
        c.arg("--ca-file").arg(&creds.ca);
    }
    c.args(extra).output().unwrap()
}

/// The healthy node, with eight ports (eight single-port RoCE functions of
/// tests/support/sysfs.rs) instead of the sample's two: the series a big node exports.
fn eight_port_series(dir: &Path, log: &Path) -> (usize, usize) {
    support::copy_tree(&support::fixtures().join("nodes/v100"), dir);
    std::fs::remove_dir_all(dir.join("sys")).unwrap();
    std::fs::remove_dir_all(dir.join("proc/4301")).unwrap();
    support::sysfs::sriov_tree(dir, 8, 0);
    support::fleet::put(dir, "/sys/module/ib_core/parameters/netns_mode", "Y\n");
    support::fleet::put(
        dir,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[containerd]\nenabled = false\n[systemd]\nenabled = false\n[gpudirect]\nenabled = false\n",
    );
    let addr = support::free_addr();
    let _a = Agents(vec![Some(serve(dir, &addr, log))]);
    let mut text = String::new();
    wait_until("the 8-port agent", Duration::from_secs(30), || {
        get(&addr, "/metrics").map(|t| text = t).is_some()
    });
    assert!(
        text.contains("rdma_node_agent_ready 1\n"),
        "the 8-port node is not ready:\n{text}"
    );
    assert_eq!(text.matches("rdma_node_agent_port_active{").count(), 8);
    (series(&text), text.len())
}

/// Each alert's nodes (label `node`), of alerts firing now.
fn firing(p: &Prometheus) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for a in p.api("/api/v1/alerts")["alerts"].as_array().unwrap() {
        if a["state"] == "firing" {
            out.entry(a["labels"]["alertname"].as_str().unwrap().into())
                .or_default()
                .insert(a["labels"]["node"].as_str().unwrap_or("?").into());
        }
    }
    out
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
#[ignore = "200 agents and a real Prometheus (Debian's prometheus package, root for the inotify limit): run by scripts/test.sh"]
fn fleet_and_the_alerts_name_exactly_the_planted_nodes_of_200() {
    let start = Instant::now();
    let _limit = InotifyLimit::raise(NODES + 1);
    // 200 trees of ~90 files: on tmpfs where there is one (on this machine's
    // loaded disk, making and removing them took 20 s and 50 s).
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let logs = base.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let tpl = base.path().join("template");
    template(&tpl);

    // The trees, and one agent each on a loopback port of its own.
    let listeners: Vec<std::net::TcpListener> = (0..NODES)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    drop(listeners);
    let roots: Vec<PathBuf> = (1..=NODES)
        .map(|i| {
            let r = base.path().join(name(i));
            support::copy_tree(&tpl, &r);
            plant(&r, fault(i));
            r
        })
        .collect();
    let mut agents = Agents(
        (0..NODES)
            .map(|k| Some(serve(&roots[k], &addrs[k], &logs.join(name(k + 1)))))
            .collect(),
    );
    let mut bodies = vec![String::new(); NODES];
    wait_until("every agent's /metrics", Duration::from_secs(90), || {
        (0..NODES).all(|k| {
            !bodies[k].is_empty() || get(&addrs[k], "/metrics").map(|t| bodies[k] = t).is_some()
        })
    });
    let agents_up = start.elapsed();
    let healthy: Vec<usize> = (0..NODES)
        .filter(|k| fault(k + 1) == Fault::Healthy)
        .collect();
    let avg = |ks: &[usize], f: &dyn Fn(&str) -> usize| {
        ks.iter().map(|k| f(&bodies[*k])).sum::<usize>() as f64 / ks.len() as f64
    };
    let all: Vec<usize> = (0..NODES).collect();
    let figures_series = (avg(&healthy, &series), avg(&all, &series));
    let figures_bytes = (avg(&healthy, &|t| t.len()), avg(&all, &|t| t.len()));

    // Prometheus: every agent a static target with its node label; the fleet
    // rules with `for:` cut to 0s (their durations are promtool's to test) so
    // the alerts fire within the test.
    let creds = Credentials::new(base.path());
    let rules =
        std::fs::read_to_string(repo("packaging/prometheus/rdma-node-agent-fleet-rules.yml"))
            .unwrap()
            .lines()
            .map(|l| match l.trim_start().strip_prefix("for:") {
                Some(_) => format!("{}for: 0s", &l[..l.len() - l.trim_start().len()]),
                None => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
    let pdir = base.path().join("prometheus");
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::write(pdir.join("fleet-rules.yml"), rules).unwrap();
    let mut config = String::from(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files: [fleet-rules.yml]\nscrape_configs:\n  - job_name: rdma-node-agent\n    static_configs:\n",
    );
    for (k, a) in addrs.iter().enumerate() {
        config.push_str(&format!(
            "      - targets: ['{a}']\n        labels: {{node: {}}}\n",
            name(k + 1)
        ));
    }
    let prom = Prometheus::start(&pdir, &config, &creds);
    wait_until("every target up", Duration::from_secs(60), || {
        prom.scalar("count(up == 1)") as usize == NODES
    });
    let targets_up = start.elapsed();

    // Flaps while Prometheus watches; then one agent stops.
    for k in (0..NODES).filter(|k| fault(k + 1) == Fault::Flapping) {
        let pid = nix::unistd::Pid::from_raw(agents.0[k].as_ref().unwrap().id() as i32);
        for _ in 0..4 {
            for up in [false, true] {
                set_port(&roots[k], up);
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
                let want = format!(
                    "rdma_node_agent_port_active{{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"}} {}\n",
                    u8::from(up)
                );
                wait_until("a reconcile after SIGHUP", Duration::from_secs(10), || {
                    get(&addrs[k], "/metrics").is_some_and(|t| t.contains(&want))
                });
            }
        }
    }
    for k in (0..NODES).filter(|k| fault(k + 1) == Fault::Gone) {
        let mut c = agents.0[k].take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
    wait_until(
        "Prometheus to see the flaps and the stopped agent",
        Duration::from_secs(30),
        || {
            prom.scalar("count(rdma_node_agent_port_flaps_total == 4)") as usize
                == planted(&[Fault::Flapping]).len()
                && prom.scalar("count(up == 0)") as usize == planted(&[Fault::Gone]).len()
        },
    );

    // The alerts, once the rules have run on what Prometheus now holds.
    let expected: BTreeMap<String, BTreeSet<String>> = [
        ("RDMANotReadyReason", planted(&[Fault::PortDown])),
        ("RDMANodeNotReporting", planted(&[Fault::Gone])),
        ("RDMAFirmwareMinority", planted(&[Fault::Firmware])),
        ("RDMAPortBelowCohortRate", planted(&[Fault::SlowPort])),
        ("RDMAMtuMismatch", planted(&[Fault::Mtu])),
        ("RDMANetnsModeMismatch", planted(&[Fault::Netns])),
        ("RDMAMemlockTargetMismatch", planted(&[Fault::Memlock])),
        ("RDMAGpuDriverMismatch", planted(&[Fault::GpuDriver])),
        ("RDMAKubeletResourcesZero", planted(&[Fault::KubeletZero])),
        ("RDMALinkFlapping", planted(&[Fault::Flapping])),
    ]
    .into_iter()
    .map(|(a, n)| (a.to_owned(), n))
    .collect();
    let mut got = BTreeMap::new();
    let settled = Instant::now();
    while settled.elapsed() < Duration::from_secs(20) {
        got = firing(&prom);
        if got == expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(got, expected, "firing alerts by node");
    let reasons: BTreeSet<String> = prom.api("/api/v1/alerts")["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["alertname"] == "RDMANotReadyReason")
        .map(|a| a["labels"]["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reasons, BTreeSet::from(["port_down".to_owned()]));

    // fleet, for automation: exactly the planted nodes and reasons.
    let o = fleet(&prom, &creds, true, true, &["--json"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    check_report(&serde_json::from_slice(&o.stdout).unwrap());

    // For people: the table docs/fleet.md prints; and how long fleet takes.
    let mut times = Vec::new();
    let mut table = String::new();
    for _ in 0..5 {
        let t = Instant::now();
        let o = fleet(&prom, &creds, true, true, &[]);
        times.push(t.elapsed().as_secs_f64());
        assert_eq!(o.status.code(), Some(1));
        table = String::from_utf8(o.stdout).unwrap();
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    // The floor beside it: the same twelve answers fetched by the test's own
    // client, one after another, already connected, with nothing judged.
    let floor = Instant::now();
    let qs = rdma_node_agent::fleetview::queries(Duration::from_secs(3600), 3.0);
    let answers: usize = qs.iter().map(|(_, q)| prom.query(q).unwrap().len()).sum();
    let floor = floor.elapsed().as_secs_f64();
    for n in planted(&[
        Fault::PortDown,
        Fault::Firmware,
        Fault::Mtu,
        Fault::SlowPort,
        Fault::Flapping,
        Fault::CriDisabled,
        Fault::Netns,
        Fault::Memlock,
        Fault::GpuDriver,
        Fault::KubeletZero,
        Fault::Gone,
    ]) {
        assert!(table.contains(&n), "the table does not name {n}:\n{table}");
    }

    // Credentials and TLS are checked, and never shown.
    let o = fleet(&prom, &creds, false, true, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("HTTP 401") && e.contains(&prom.url) && e.contains("--basic-auth-password-file"),
        "{e}"
    );
    let o = fleet(&prom, &creds, true, false, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("cannot reach Prometheus") && e.contains("--ca-file"),
        "{e}"
    );
    assert!(!e.contains(&creds.password) && !table.contains(&creds.password));

    // The dashboard's every expression runs on this Prometheus.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("packaging/grafana/rdma-node-agent-fleet.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let exprs = dashboard_exprs(&dash);
    assert!(exprs.len() >= 8, "{exprs:?}");
    for e in &exprs {
        prom.query(e)
            .unwrap_or_else(|err| panic!("the dashboard's `{e}`: {err}"));
    }

    // The figures.
    let head_series = prom.own_metric("prometheus_tsdb_head_series");
    let (s8, b8) = eight_port_series(&base.path().join("eight"), &logs.join("eight"));
    let rss = prom.rss_bytes();
    let scraped = prom.scalar("sum(scrape_samples_scraped)");
    println!("fleet test figures (this machine, {NODES} agents, scrape_interval 1s):");
    println!(
        "  series per node: healthy (2 ports) {:.0}, average {:.1}, healthy with 8 ports {s8}",
        figures_series.0, figures_series.1
    );
    println!(
        "  scrape bytes per node: healthy {:.0}, average {:.0}, 8 ports {b8}",
        figures_bytes.0, figures_bytes.1
    );
    println!(
        "  samples per scrape round: {scraped:.0}; Prometheus head series {head_series:.0}; RSS {:.1} MiB",
        rss as f64 / 1048576.0
    );
    println!(
        "  fleet wall time over 5 runs: min {:.3} s, median {:.3} s, max {:.3} s; \
         floor (its 12 queries, {answers} samples, fetched in sequence by the test's client): {floor:.3} s",
        times[0], times[2], times[4]
    );
    println!(
        "  agents up after {:.1} s, targets up after {:.1} s, test {:.1} s",
        agents_up.as_secs_f64(),
        targets_up.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    println!("{table}");
    let teardown = Instant::now();
    drop(prom);
    drop(agents);
    drop(base);
    println!("  teardown {:.1} s", teardown.elapsed().as_secs_f64());
}

/// The `--json` report names exactly the planted nodes, under the planted reasons.
fn check_report(r: &Value) {
    let names = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| {
                x.as_str()
                    .map_or_else(|| x["node"].as_str().unwrap().to_owned(), str::to_owned)
            })
            .collect()
    };
    let groups = |v: &Value| -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["reason"].as_str().unwrap().to_owned(),
                    (names(&g["checks"]), names(&g["nodes"])),
                )
            })
            .collect()
    };
    let checks = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(r["nodes"], NODES - 1, "{r:#}");
    assert_eq!(
        r["ready"],
        NODES - 1 - planted(&[Fault::PortDown]).len(),
        "{r:#}"
    );
    assert_eq!(
        groups(&r["not_ready"]),
        BTreeMap::from([(
            "port_down".to_owned(),
            (checks(&["rdma.devices"]), planted(&[Fault::PortDown]))
        )]),
        "{r:#}"
    );
    assert_eq!(
        groups(&r["warnings"]),
        BTreeMap::from([
            (
                "cri_disabled".to_owned(),
                (
                    checks(&["containerd.memlock"]),
                    // The mixed node is not ready: its warnings are not listed apart.
                    planted(&[Fault::CriDisabled])
                        .into_iter()
                        .filter(|n| !planted(&[Fault::PortDown]).contains(n))
                        .collect()
                )
            ),
            (
                "kubelet_resources_zero".to_owned(),
                (checks(&["kubelet.devices"]), planted(&[Fault::KubeletZero]))
            ),
            (
                "link_flapping".to_owned(),
                (checks(&["rdma.link"]), planted(&[Fault::Flapping]))
            ),
        ]),
        "{r:#}"
    );
    assert_eq!(names(&r["not_reporting"]), planted(&[Fault::Gone]));
    let outliers = |key: &str, want: &[Fault], field: &str, value: &str| {
        let v = r[key].as_array().unwrap();
        assert_eq!(names(&r[key]), planted(want), "{key}: {v:#?}");
        assert!(
            v.iter()
                .all(|o| o[field].to_string().trim_matches('"') == value),
            "{key}: {v:#?}"
        );
    };
    outliers(
        "firmware_minority",
        &[Fault::Firmware],
        "fw_ver",
        "12.27.1016",
    );
    outliers(
        "ports_below_cohort_rate",
        &[Fault::SlowPort],
        "rate_gbps",
        "56.0",
    );
    outliers("mtu_mismatch", &[Fault::Mtu], "mtu", "4092");
    let settings: BTreeSet<(String, String, String)> = r["setting_minority"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let f = |k: &str| o[k].as_str().unwrap().to_owned();
            (f("node"), f("setting"), f("value"))
        })
        .collect();
    let want: BTreeSet<(String, String, String)> = [
        (Fault::Netns, "netns_mode", "exclusive"),
        (Fault::Memlock, "memlock_target", "64GiB"),
        (Fault::GpuDriver, "gpu_driver", "570.86.15"),
    ]
    .into_iter()
    .flat_map(|(f, k, v)| {
        planted(&[f])
            .into_iter()
            .map(move |n| (n, k.to_owned(), v.to_owned()))
    })
    .collect();
    assert_eq!(settings, want);
    outliers(
        "kubelet_rdma_zero",
        &[Fault::KubeletZero],
        "active_ports",
        "2",
    );
    outliers("link_flapping", &[Fault::Flapping], "device", "mlx5_0");
    // Exactly the four flaps made, not an extrapolation of them.
    outliers("link_flapping", &[Fault::Flapping], "flaps", "4.0");
    let all: BTreeSet<String> = planted(&[
        Fault::PortDown,
        Fault::Firmware,
        Fault::Mtu,
        Fault::SlowPort,
        Fault::Flapping,
        Fault::Netns,
        Fault::Memlock,
        Fault::GpuDriver,
        Fault::KubeletZero,
        Fault::Gone,
    ]);
    assert_eq!(names(&r["problem_nodes"]), all, "{r:#}");
}

/// Every `expr` of the dashboard's panels' targets.
fn dashboard_exprs(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => out.extend(dashboard_exprs(x)),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| out.extend(dashboard_exprs(x))),
        _ => {}
    }
    out
}

/// A Prometheus that scrapes no agent: nothing to judge is not "every node is
/// fine" (exit 2, said on stderr, and as {"error"} with --json).
#[test]
#[ignore = "a real Prometheus (Debian's prometheus package): run by scripts/test.sh"]
fn a_prometheus_without_agents_is_not_a_healthy_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let creds = Credentials::new(dir.path());
    let prom = Prometheus::start(
        dir.path(),
        "global:\n  scrape_interval: 1s\nscrape_configs: []\n",
        &creds,
    );
    let o = fleet(&prom, &creds, true, true, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("has no rdma_node_agent_ready series") && e.contains(&prom.url),
        "{e}"
    );
    assert!(o.stdout.is_empty());
    let o = fleet(&prom, &creds, true, true, &["--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("scrapes no rdma-node-agent"),
        "{v}"
    );
}
