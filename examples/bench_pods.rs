//! The `pods.rdma` benchmark (scripts/bench-pods-rdma.sh runs it, as root, on
//! cgroup v1): `bench_pods AGENT [PROCS] [PER_CONTAINER] [FDS] [RUNS] [HOLDERS]`.
//!
//! Starts PROCS real processes, each holding FDS descriptors (/dev/null), in
//! kubepods cgroups of the pids and devices hierarchies as the kubelet's
//! cgroupfs driver places containers (PER_CONTAINER processes a container),
//! then times, as medians of RUNS rounds after a warm-up round (each round runs
//! every case once, so load from elsewhere falls on all of them alike):
//!
//! - the floor: a bare pass that lists each process's /proc/<pid>/fd and reads
//!   every link relative to it (openat, getdents64, readlinkat), nothing else;
//! - `AGENT check --only pods.rdma --json` on this host, whole process: here no
//!   uverbs device exists, so no process can hold one and no descriptor is
//!   read (`found_by: no_uverbs`; before that route, every pod process's
//!   descriptors were read: the fallback a node with devices whose kernel does
//!   not answer still takes);
//! - the check's gather and verdict in this process, restrack unavailable;
//! - the same with a restrack answer given in place of the kernel's: a FAKE
//!   netlink answer naming HOLDERS of the processes (this machine has no RDMA
//!   device to answer), so only their descriptors are read.
//!
//! `BENCH_PODS_HOLD=SECS` only starts the processes and holds them that long,
//! to profile by hand. Every process it starts is killed by PID, and its
//! cgroups removed, however it ends.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, pause};

use rdma_node_agent::concerns::readiness::pods_rdma;
use rdma_node_agent::config::Severity;
use rdma_node_agent::host::Host;
use rdma_node_agent::host::limit::Limit;
use rdma_node_agent::host::netlink::restrack::{Holders, PD, Unavailable};
use rdma_node_agent::host::snapshot::Snapshot;

struct Bench {
    kids: Vec<Pid>,
    cgroups: Vec<PathBuf>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        for &k in &self.kids {
            let _ = kill(k, Signal::SIGKILL);
        }
        for &k in &self.kids {
            let _ = waitpid(k, None);
        }
        for dir in self.cgroups.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// User + system CPU time of this process (`Self_`) or of its waited-for children, in ms.
fn cpu(who: UsageWho) -> f64 {
    let u = getrusage(who).expect("getrusage");
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e3 + t.tv_usec() as f64 / 1e3;
    ms(u.user_time()) + ms(u.system_time())
}

type Case<'a> = (UsageWho, Box<dyn FnMut() -> serde_json::Value + 'a>);

/// Runs every case once a round, RUNS + 1 rounds; per case the medians of
/// wall and CPU time of all rounds but the first, in ms (CPU: `who`'s, the
/// process itself or the children it ran), and its last answer.
fn timed_rounds(runs: usize, cases: &mut [Case<'_>]) -> (Vec<(f64, f64)>, Vec<serde_json::Value>) {
    let mut walls = vec![Vec::new(); cases.len()];
    let mut cpus = vec![Vec::new(); cases.len()];
    let mut lasts = vec![serde_json::Value::Null; cases.len()];
    for round in 0..=runs {
        for (i, (who, f)) in cases.iter_mut().enumerate() {
            let (t, c) = (Instant::now(), cpu(*who));
            lasts[i] = f();
            if round > 0 {
                walls[i].push(t.elapsed().as_secs_f64() * 1e3);
                cpus[i].push(cpu(*who) - c);
            }
        }
    }
    let figures = walls
        .into_iter()
        .zip(cpus)
        .map(|(w, c)| (median(w), median(c)))
        .collect();
    (figures, lasts)
}

/// The floor: every descriptor link of every process, read relative to its fd directory.
fn floor(pids: &[Pid]) -> usize {
    use rustix::fs::{CWD, Dir, Mode, OFlags, openat, readlinkat};
    let mut n = 0;
    for p in pids {
        let Ok(dir) = openat(
            CWD,
            format!("/proc/{p}/fd"),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let Ok(mut entries) = Dir::read_from(&dir) else {
            continue;
        };
        let mut buf = Vec::with_capacity(256);
        while let Some(Ok(e)) = entries.read() {
            if e.file_name().to_bytes().first() == Some(&b'.') {
                continue;
            }
            if let Ok(t) = readlinkat(&dir, e.file_name(), std::mem::take(&mut buf)) {
                n += 1;
                buf = t.into_bytes();
                buf.clear();
            }
        }
    }
    n
}

fn in_process(holders: Result<Holders, Unavailable>) -> serde_json::Value {
    let snap = Snapshot::new(Host::new("/")).with_restrack(holders);
    let facts = pods_rdma::gather(&snap).expect("gather");
    let c = pods_rdma::check_facts(&facts, Limit::UNLIMITED, Severity::Warn);
    c.details
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(agent) = args.first() else {
        eprintln!("usage: bench_pods AGENT [PROCS] [PER_CONTAINER] [FDS] [RUNS] [HOLDERS]");
        return ExitCode::FAILURE;
    };
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (procs, per, fds, runs, holders) =
        (num(1, 2000), num(2, 2), num(3, 65), num(4, 5), num(5, 8));
    let v1 = Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists();
    if !v1 {
        eprintln!(
            "needs root and cgroup v1 (/sys/fs/cgroup/pids): the kubelet's cgroupfs layout is made there"
        );
        return ExitCode::FAILURE;
    }
    let tag = format!("benchpods{}", std::process::id());
    let mut b = Bench {
        kids: Vec::new(),
        cgroups: Vec::new(),
    };
    for i in 0..procs {
        // SAFETY: this process is single-threaded here; the child only opens
        // files and sleeps until killed.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                let mut held = Vec::new();
                for _ in 0..fds {
                    held.extend(fs::File::open("/dev/null"));
                }
                loop {
                    pause();
                }
            }
            Ok(ForkResult::Parent { child }) => b.kids.push(child),
            Err(e) => {
                eprintln!("fork {i}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    for (i, kid) in b.kids.iter().enumerate() {
        let c = i / per;
        let id = format!("{:0>56}{c:08x}", "be4c");
        for ctrl in ["pids", "devices"] {
            let pod = Path::new("/sys/fs/cgroup")
                .join(ctrl)
                .join(format!("kubepods/besteffort/pod{tag}-{c}"));
            let dir = pod.join(&id);
            if !dir.exists() {
                fs::create_dir_all(&dir).expect("cgroup");
                b.cgroups.push(pod.clone());
                b.cgroups.push(dir.clone());
            }
            fs::write(dir.join("cgroup.procs"), kid.to_string()).expect("cgroup.procs");
        }
    }
    // Every process holds its descriptors before anything is timed.
    for kid in &b.kids {
        while fs::read_dir(format!("/proc/{kid}/fd")).map_or(0, |d| d.count()) < fds {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    // BENCH_PODS_HOLD=SECS: keep the processes that long, untimed, to profile by hand.
    if let Some(secs) = std::env::var("BENCH_PODS_HOLD")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        println!("holding {procs} processes for {secs} s");
        std::thread::sleep(std::time::Duration::from_secs(secs));
        return ExitCode::SUCCESS;
    }
    let containers = procs.div_ceil(per);
    let step = (procs / holders.max(1)).max(1);
    let mut answer = Holders {
        devices: vec!["mlx5_0".into()],
        ..Holders::default()
    };
    for kid in b.kids.iter().step_by(step).take(holders) {
        answer.add(kid.as_raw() as u32, "mlx5_0", PD);
    }
    let kids = &b.kids;
    // Round after round, each case once a round: load from elsewhere falls on all alike.
    let mut cases: Vec<(UsageWho, Box<dyn FnMut() -> serde_json::Value + '_>)> = vec![
        (
            UsageWho::RUSAGE_SELF,
            Box::new(|| serde_json::Value::from(floor(kids))),
        ),
        (
            UsageWho::RUSAGE_CHILDREN,
            Box::new(|| {
                let out = Command::new(agent)
                    .args(["check", "--only", "pods.rdma", "--json"])
                    .output()
                    .expect("the agent");
                let report: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                report["checks"][0].clone()
            }),
        ),
        (
            UsageWho::RUSAGE_SELF,
            Box::new(|| in_process(Err(Unavailable::NoDevices))),
        ),
        (
            UsageWho::RUSAGE_SELF,
            Box::new(|| in_process(Ok(answer.clone()))),
        ),
    ];
    let (mut figures, lasts) = timed_rounds(runs, &mut cases);
    let rt_ms = figures.pop().unwrap();
    let scan_ms = figures.pop().unwrap();
    let bin_ms = figures.pop().unwrap();
    let floor_ms = figures.pop().unwrap();
    let links = lasts[0].as_u64().unwrap_or(0);
    let check = &lasts[1];
    let (scan, rt) = (&lasts[2], &lasts[3]);
    let found = |d: &serde_json::Value| d["containers"].as_array().map_or(0, Vec::len);

    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "pods.rdma at {procs} pod processes in {containers} containers, {links} descriptors; medians of {runs}; load {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<74} {:>8} {:>8} {:>8} {:>8}",
        "", "wall ms", "x floor", "cpu ms", "x floor"
    );
    let row = |what: &str, (wall, cpu): (f64, f64)| {
        println!(
            "{what:<74} {wall:>8.1} {:>8.2} {cpu:>8.1} {:>8.2}",
            wall / floor_ms.0,
            cpu / floor_ms.1
        )
    };
    row(
        "floor: bare pass, openat + getdents64 + readlinkat of every descriptor",
        floor_ms,
    );
    row(
        &format!(
            "`check --only pods.rdma --json`, whole process (found_by: {})",
            check["details"]["found_by"]["by"].as_str().unwrap_or("?")
        ),
        bin_ms,
    );
    row(
        &format!(
            "gather + verdict in process, no restrack (found_by: {})",
            scan["found_by"]["by"].as_str().unwrap_or("?")
        ),
        scan_ms,
    );
    row(
        &format!("gather + verdict in process, FAKE restrack answer naming {holders} PIDs"),
        rt_ms,
    );
    println!(
        "found: binary {} / fd scan {} / restrack {} RDMA container(s) (restrack's: {} holders in {})",
        found(&check["details"]),
        found(scan),
        found(rt),
        rt["found_by"]["holders"],
        rt["found_by"]["by"]
    );
    let at_most = |v: f64, t: f64| if v <= t { "met" } else { "NOT met" };
    let (rt_x, bin_x) = (rt_ms.0 / floor_ms.0, bin_ms.0 / floor_ms.0);
    let (rt_cx, bin_cx) = (rt_ms.1 / floor_ms.1, bin_ms.1 / floor_ms.1);
    println!(
        "targets: with restrack <= 0.1x the floor: wall {rt_x:.3}x -> {}, cpu {rt_cx:.3}x -> {}",
        at_most(rt_x, 0.1),
        at_most(rt_cx, 0.1)
    );
    println!(
        "         without restrack (the binary) <= 1.2x: wall {bin_x:.2}x -> {}, cpu {bin_cx:.2}x -> {}",
        at_most(bin_x, 1.2),
        at_most(bin_cx, 1.2)
    );
    ExitCode::SUCCESS
}
