//! Figures for the agent's hot paths (`cargo bench`): the containerd config edit on
//! a large real-world config, base spec generation, and a full check cycle on a
//! sample node. Targets: one config edit <= 1 ms.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};

use rdma_node_agent::agent::Agent;
use rdma_node_agent::concerns::containerd::spec::{self, Rlimits};
use rdma_node_agent::concerns::containerd::toml::ConfigFile;
use rdma_node_agent::concerns::containerd::{self, Facts};
use rdma_node_agent::config::{Config, ContainerdConfig};
use rdma_node_agent::host::Host;
use rdma_node_agent::host::limit::Limit;

#[path = "../tests/support/sysfs.rs"]
#[allow(dead_code)]
mod sysfs;

#[path = "../tests/support/pcie.rs"]
#[allow(dead_code)]
mod pcie;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn large_config_facts() -> Facts {
    let text =
        std::fs::read_to_string(fixtures().join("containerd/large-default-1.6.toml")).unwrap();
    containerd::facts_from_text(&text).unwrap()
}

fn benches(c: &mut Criterion) {
    let facts = large_config_facts();
    let cfg = ContainerdConfig::default();
    c.bench_function(
        "containerd config edit (254-line config, 3 handlers)",
        |b| b.iter(|| containerd::decide(black_box(&facts), &cfg, &|p| p.to_owned()).unwrap()),
    );

    let text =
        std::fs::read_to_string(fixtures().join("containerd/large-default-1.6.toml")).unwrap();
    c.bench_function("containerd config parse (254 lines)", |b| {
        b.iter(|| {
            ConfigFile::parse(
                Path::new("/c"),
                Path::new("c"),
                Some(black_box(text.clone())),
                0o644,
            )
            .unwrap()
        })
    });

    let limits = Rlimits {
        memlock: Limit::UNLIMITED,
        extra: vec![],
    };
    c.bench_function("base spec generation", |b| {
        b.iter(|| spec::generate(black_box(spec::BUILTIN_DEFAULT), &limits).unwrap())
    });

    let agent = Agent::new(Host::new(fixtures().join("nodes/v100")), Config::default());
    c.bench_function("full check cycle, V100 sample node", |b| {
        b.iter(|| agent.check(&[]))
    });

    // SR-IOV nodes: 8 PFs with 1, 15 and 127 VFs each (16, 128 and 1024 devices).
    let mut group = c.benchmark_group("full check cycle, synthetic SR-IOV node");
    group.sample_size(20);
    for vfs in [1u32, 15, 127] {
        let dir = tempfile::tempdir().unwrap();
        sysfs::sriov_tree(dir.path(), 8, vfs);
        let devices = 8 * (vfs + 1);
        let agent = Agent::new(Host::new(dir.path()), Config::default());
        group.throughput(criterion::Throughput::Elements(u64::from(devices)));
        group.bench_function(format!("{devices} devices"), |b| {
            b.iter(|| agent.check(&[]))
        });
    }
    group.finish();

    // gpudirect.path on an 8-GPU, 8-NIC tree with two switch levels
    // (support::pcie::hgx_tree): the concern's cost beside rdma.devices'.
    // Target: gpudirect.path adds <= 2 ms to `check --only rdma.devices`.
    let dir = tempfile::tempdir().unwrap();
    pcie::hgx_tree(dir.path());
    let agent = Agent::new(Host::new(dir.path()), Config::default());
    let mut group = c.benchmark_group("8 GPUs 8 NICs two switch levels");
    group.sample_size(50);
    let only = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases = [
        ("check --only rdma.devices", only(&["rdma.devices"])),
        ("check --only gpudirect.path", only(&["gpudirect.path"])),
        (
            "check --only rdma.devices --only gpudirect.path",
            only(&["rdma.devices", "gpudirect.path"]),
        ),
    ];
    for (name, ids) in &cases {
        group.bench_function(*name, |b| b.iter(|| agent.check(black_box(ids))));
    }
    // The same as CPU time (user + system) of the process: on a loaded machine
    // the wall time is mostly waiting for a core.
    for (name, ids) in &cases {
        group.bench_function(format!("{name} (CPU time)"), |b| {
            b.iter_custom(|iters| {
                let t0 = cpu_time();
                for _ in 0..iters {
                    black_box(agent.check(black_box(ids)));
                }
                cpu_time() - t0
            })
        });
    }
    group.finish();
}

/// User plus system CPU time of this process so far.
/// rdma.counters on the 8-NIC tree, each port carrying the public mlx5 counter
/// set (tests/fixtures/counters/procfs-mlx5: 21 `counters/`, 25 `hw_counters/`),
/// beside the floor: listing the same two directories of every port and
/// reading every file in them (open, read, close), nothing else. Target:
/// reading every counter of 8 NICs adds <= 1 ms to a cycle.
fn counters(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    pcie::hgx_tree(root);
    let set = fixtures().join("counters/procfs-mlx5");
    let mut ports = Vec::new();
    for n in 0..8 {
        let port = root.join(format!("sys/class/infiniband/mlx5_{n}/ports/1"));
        for sub in ["counters", "hw_counters"] {
            std::fs::create_dir_all(port.join(sub)).unwrap();
            for e in std::fs::read_dir(set.join(sub)).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), port.join(sub).join(e.file_name())).unwrap();
            }
        }
        ports.push(port);
    }
    let floor = || {
        let mut bytes = 0;
        for port in &ports {
            for sub in ["counters", "hw_counters"] {
                for e in std::fs::read_dir(port.join(sub)).unwrap() {
                    bytes += std::fs::read_to_string(e.unwrap().path()).unwrap().len();
                }
            }
        }
        bytes
    };
    let agent = Agent::new(Host::new(root), Config::default());
    let only = vec!["rdma.counters".to_owned()];
    let mut group = c.benchmark_group("rdma.counters, 8 NICs x 46 counters");
    group.sample_size(50);
    group.bench_function("floor: list and read the same files", |b| {
        b.iter(|| black_box(floor()))
    });
    group.bench_function("check --only rdma.counters", |b| {
        b.iter(|| agent.check(black_box(&only)))
    });
    // The same as the process's CPU time: on a loaded machine the wall time
    // is mostly waiting for a core.
    group.bench_function("floor (CPU time)", |b| {
        b.iter_custom(|iters| {
            let t0 = cpu_time();
            for _ in 0..iters {
                black_box(floor());
            }
            cpu_time() - t0
        })
    });
    group.bench_function("check --only rdma.counters (CPU time)", |b| {
        b.iter_custom(|iters| {
            let t0 = cpu_time();
            for _ in 0..iters {
                black_box(agent.check(black_box(&only)));
            }
            cpu_time() - t0
        })
    });
    group.finish();
}

fn cpu_time() -> std::time::Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let d = |t: nix::sys::time::TimeVal| {
        std::time::Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
    };
    d(u.user_time()) + d(u.system_time())
}

criterion_group!(agent_benches, benches, counters);
criterion_main!(agent_benches);
