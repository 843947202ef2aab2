//! The fleet view end to end: 200 agents on loopback, each `serve`-ing its own
//! `--root` tree (the V100 sample with a planted fault, tests/support/fleet.rs),
//! a real Prometheus (Debian's package) scraping them every second with the
//! fleet rules loaded, its API behind TLS and basic auth. `fleet` and the alerts
//! must name exactly the planted nodes and reasons; every expression of the
//! Grafana dashboard must run. Prints the figures docs/fleet.md quotes (run with
//! `--nocapture` to see them).

#[path = "fleet/report.rs"]
mod report;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::agents::{Agents, InotifyLimit, eight_port_series, series, serve, wait_until};
use support::fleet::{Fault, dashboard_exprs, plant, set_port, template};
use support::http_get::get;
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
        support::fleet_replay::rules_now("packaging/prometheus/rdma-node-agent-fleet-rules.yml");
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
    report::check(&serde_json::from_slice(&o.stdout).unwrap());

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
