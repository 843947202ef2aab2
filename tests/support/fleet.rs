//! Fleet trees: copies of the V100 sample node (tests/fixtures/nodes/v100) with
//! one planted fault each, for the 200-agent Prometheus test and the fleet
//! rules' promtool tests.
//!
//! Planted on every tree (hand-written, like the sample itself): each IB port's
//! IPoIB netdev (`gid_attrs/ndevs/0`, `/sys/class/net/ibN/mtu` 2044, the
//! datagram-mode default) and its GID 0 in the default subnet
//! (`fe80:0000:0000:0000`), so ports carry an MTU and a fabric label; the
//! sample's RDMA pod (pid 4301, which warns) is removed, the NVIDIA driver's
//! module version is set (the sample's GPUs have none), and containerd,
//! systemd and GPUDirect are off, so the healthy node is ready with no warning.

use std::fs;
use std::path::Path;

use serde_json::Value;

use super::{copy_tree, fixtures};

/// What is wrong with a node, and what `fleet` must say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Healthy,
    /// mlx5_0/1 DOWN while the config expects it: not ready, `port_down`.
    PortDown,
    /// mlx5_0 runs an older firmware than its board id's others.
    Firmware,
    /// ib0's MTU is 4092 where the fabric's is 2044.
    Mtu,
    /// mlx5_1/1 trained at 56 Gb/s (FDR) where its cohort runs 100 (EDR).
    SlowPort,
    /// mlx5_0/1 goes DOWN and back four times while Prometheus watches.
    Flapping,
    /// containerd's CRI plugin disabled: `cri_disabled` (a warning).
    CriDisabled,
    /// The RDMA netns mode is exclusive where the fleet's is shared.
    Netns,
    /// The kubelet (its socket) has no checkpoint: no RDMA device advertised.
    KubeletZero,
    /// Containers get 64 GiB of locked memory where the fleet gives unlimited.
    Memlock,
    /// NVIDIA driver 570.86.15 where the fleet runs 580.95.05.
    GpuDriver,
    /// PortDown, Firmware and CriDisabled at once.
    Mixed,
    /// The agent is stopped once Prometheus has scraped it.
    Gone,
    /// mlx5_0/1's symbol errors rise (rdma.counters) while Prometheus watches.
    PortErrors,
}

const CONFIG: &str = "mode = \"report\"\n[containerd]\nenabled = false\n[systemd]\nenabled = false\n[gpudirect]\nenabled = false\n";

/// Replaces a file under the tree (following the tree's own sysfs links).
pub fn put(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// The shared base: the V100 sample with the additions above.
pub fn template(root: &Path) {
    copy_tree(&fixtures().join("nodes/v100"), root);
    fs::remove_dir_all(root.join("proc/4301")).unwrap();
    put(root, "/etc/rdma-node-agent/config.toml", CONFIG);
    put(root, "/sys/module/nvidia/version", "580.95.05\n");
    for (dev, netdev, guid) in [("mlx5_0", "ib0", "6a30"), ("mlx5_1", "ib1", "6a31")] {
        let port = format!("/sys/class/infiniband/{dev}/ports/1");
        put(
            root,
            &format!("{port}/gid_attrs/ndevs/0"),
            &format!("{netdev}\n"),
        );
        put(
            root,
            &format!("{port}/gids/0"),
            &format!("fe80:0000:0000:0000:0c42:a103:0065:{guid}\n"),
        );
        put(root, &format!("/sys/class/net/{netdev}/mtu"), "2044\n");
    }
}

/// Sets mlx5_0 port 1 ACTIVE or DOWN, as the kernel writes `state` and `phys_state`.
pub fn set_port(root: &Path, active: bool) {
    let p = "/sys/class/infiniband/mlx5_0/ports/1";
    let (state, phys) = if active {
        ("4: ACTIVE\n", "5: LinkUp\n")
    } else {
        ("1: DOWN\n", "3: Disabled\n")
    };
    put(root, &format!("{p}/state"), state);
    put(root, &format!("{p}/phys_state"), phys);
}

/// Plants a fault on a copy of the template.
pub fn plant(root: &Path, fault: Fault) {
    let mut config = CONFIG.to_owned();
    let faults: &[Fault] = match fault {
        Fault::Mixed => &[Fault::PortDown, Fault::Firmware, Fault::CriDisabled],
        _ => &[fault],
    };
    for f in faults {
        match f {
            Fault::PortDown => {
                set_port(root, false);
                config.push_str("[[rdma.expect_port]]\ndevice = \"mlx5_0\"\nport = 1\n");
            }
            Fault::Firmware => put(root, "/sys/class/infiniband/mlx5_0/fw_ver", "12.27.1016\n"),
            Fault::Mtu => put(root, "/sys/class/net/ib0/mtu", "4092\n"),
            Fault::SlowPort => put(
                root,
                "/sys/class/infiniband/mlx5_1/ports/1/rate",
                "56 Gb/sec (4X FDR)\n",
            ),
            Fault::CriDisabled => {
                config = config.replace(
                    "[containerd]\nenabled = false\n",
                    "[containerd]\nenabled = true\n",
                );
                let c = root.join("etc/containerd/config.toml");
                let text = fs::read_to_string(&c).unwrap();
                // A top-level key: before the first table.
                let at = text.find("\n[").unwrap() + 1;
                let edited = format!(
                    "{}disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n{}",
                    &text[..at],
                    &text[at..]
                );
                fs::write(&c, edited).unwrap();
            }
            Fault::Netns => put(root, "/sys/module/ib_core/parameters/netns_mode", "N\n"),
            Fault::KubeletZero => fs::remove_file(
                root.join("var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"),
            )
            .unwrap(),
            Fault::Memlock => {
                config = config.replace(
                    "[containerd]\nenabled = false\n",
                    "[containerd]\nenabled = false\nmemlock = \"64GiB\"\n",
                );
            }
            Fault::GpuDriver => put(root, "/sys/module/nvidia/version", "570.86.15\n"),
            Fault::PortErrors => {
                // A baseline the daemon took before (the history it keeps),
                // and the counter 5 above it now: the agent exports the rise.
                put(
                    root,
                    "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error",
                    "5\n",
                );
                put(
                    root,
                    "/var/lib/rdma-node-agent/counters-history.json",
                    r#"{"version":1,"boot_id":null,"ports":{"guid:0c42:a103:0065:6a30/1":{"name":"mlx5_0/1","since":1,"seen":1,"last":{"counters/symbol_error":0},"totals":{},"steps":{},"last_reset":null}}}"#,
                );
            }
            Fault::Healthy | Fault::Flapping | Fault::Gone | Fault::Mixed => {}
        }
    }
    put(root, "/etc/rdma-node-agent/config.toml", &config);
}

/// Every `expr` of the dashboard's panels' targets.
pub fn dashboard_exprs(v: &Value) -> Vec<String> {
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
