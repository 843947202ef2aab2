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
}

criterion_group!(agent_benches, benches);
criterion_main!(agent_benches);
