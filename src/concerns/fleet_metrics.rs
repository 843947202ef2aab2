//! The families a fleet compares nodes by (the `fleet` concern's; registered
//! in `concerns::registry::METRICS`): info series of value 1 whose labels
//! carry the facts (low cardinality: a handful of values per fleet).

use crate::exposition::{Families, Kind};
use crate::fleet::Fact;
use crate::observe::Observation;

fn facts(seen: &[Observation]) -> impl Iterator<Item = &Fact> {
    seen.iter().filter_map(|o| match o {
        Observation::Fleet(f) => Some(f),
        _ => None,
    })
}

pub fn families(m: &mut Families, seen: &[Observation]) {
    device_info(m, seen);
    port_info(m, seen);
    node_info(m, seen);
}

/// One series per RDMA device: its firmware, board and driver.
fn device_info(m: &mut Families, seen: &[Observation]) {
    let f = m.family(
        "device_info",
        Kind::Gauge,
        "1 per RDMA device; labels: firmware (fw_ver), board_id, driver (the kernel driver, with the OFED module version when MLNX_OFED/DOCA-OFED is installed), node_guid",
    );
    for fact in facts(seen) {
        if let Fact::Device {
            device,
            fw_ver,
            board_id,
            driver,
            node_guid,
        } = fact
        {
            f.sample(
                vec![
                    ("device", device.clone()),
                    ("fw_ver", fw_ver.clone()),
                    ("board_id", board_id.clone()),
                    ("driver", driver.clone()),
                    ("node_guid", node_guid.clone()),
                ],
                1.0,
            );
        }
    }
}

/// One series per RDMA port: its link and where it sits in the fabric.
fn port_info(m: &mut Families, seen: &[Observation]) {
    let f = m.family(
        "port_info",
        Kind::Gauge,
        "1 per RDMA port; labels: link_layer, rate (Gb/s as sysfs prints it), width (4X...), netdev and its MTU, port_mtu (RoCE: the RDMA MTU the kernel derives from the netdev's; IB: empty), fabric (ib:<GID subnet prefix> or roce:<IPv4 subnet>; empty when unknown)",
    );
    for fact in facts(seen) {
        if let Fact::Port {
            device,
            port,
            link_layer,
            rate,
            width,
            netdev,
            netdev_mtu,
            port_mtu,
            fabric,
        } = fact
        {
            f.sample(
                vec![
                    ("device", device.clone()),
                    ("port", port.to_string()),
                    ("link_layer", link_layer.clone()),
                    ("rate", rate.clone()),
                    ("width", width.clone()),
                    ("netdev", netdev.clone()),
                    ("netdev_mtu", netdev_mtu.clone()),
                    ("port_mtu", port_mtu.clone()),
                    ("fabric", fabric.clone()),
                ],
                1.0,
            );
        }
    }
}

/// One series per node: kernel, netns mode, memlock and GPU driver.
fn node_info(m: &mut Families, seen: &[Observation]) {
    let f = m.family(
        "node_info",
        Kind::Gauge,
        "1; labels: kernel release, netns_mode (live RDMA netns mode, empty when ib_core is not loaded), memlock_target, memlock_via (how containers get it: base-spec, nri or both, auto resolved; empty when containerd is not prepared), gpu_driver (NVIDIA driver version, empty without one)",
    );
    for fact in facts(seen) {
        if let Fact::Node {
            kernel,
            netns_mode,
            memlock_target,
            memlock_via,
            gpu_driver,
        } = fact
        {
            f.sample(
                vec![
                    ("kernel", kernel.clone()),
                    ("netns_mode", netns_mode.clone()),
                    ("memlock_target", memlock_target.clone()),
                    ("memlock_via", memlock_via.clone()),
                    ("gpu_driver", gpu_driver.clone()),
                ],
                1.0,
            );
        }
    }
}
