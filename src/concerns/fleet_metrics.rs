//! The families a fleet compares nodes by (the `fleet` concern's; registered
//! in `concerns::registry::METRICS`): info series of value 1 whose labels
//! carry the facts (low cardinality: a handful of values per fleet).

use crate::exposition::{Families, Kind};
use crate::fleet::Fact;
use crate::host::inventory::port::LinkLayer;
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

/// One series per RDMA port of a physical function (a VF's link is its
/// PF's share): its link and where it sits in the fabric, from the one port
/// model (`Observation::Port`, made by `rdma.devices`).
fn port_info(m: &mut Families, seen: &[Observation]) {
    let f = m.family(
        "port_info",
        Kind::Gauge,
        "1 per RDMA port; labels: link_layer, rate (Gb/s as sysfs prints it), width (4X...), netdev and its MTU, port_mtu (RoCE: the RDMA MTU the kernel derives from the netdev's; IB: empty), fabric (ib:<GID subnet prefix> or roce:<IPv4 subnet>; empty when unknown)",
    );
    let ports = seen.iter().filter_map(|o| match o {
        Observation::Port(p) if !p.vf => Some(p),
        _ => None,
    });
    for p in ports {
        // Empty label values where a fact is unknown, as before the facts were typed.
        let text = |v: Option<String>| v.unwrap_or_default();
        f.sample(
            vec![
                ("device", p.device.clone()),
                ("port", p.port.to_string()),
                (
                    "link_layer",
                    p.link_layer
                        .unwrap_or(LinkLayer::Unknown)
                        .as_str()
                        .to_owned(),
                ),
                // f64's shortest form is the kernel's: `200`, `2.5`.
                ("rate", text(p.rate_gbps.map(|r| r.to_string()))),
                ("width", text(p.width.map(|w| format!("{w}X")))),
                ("netdev", text(p.netdev.clone())),
                ("netdev_mtu", text(p.netdev_mtu.map(|m| m.to_string()))),
                ("port_mtu", text(p.port_mtu.map(|m| m.to_string()))),
                ("fabric", text(p.fabric.map(|f| f.label()))),
            ],
            1.0,
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Format;
    use crate::fleet::Fabric;
    use crate::host::inventory::Port;

    /// The labels from typed facts read as the kernel's text was before the
    /// facts were typed: the rate's number as sysfs prints it, the width with
    /// its `X`, empty where unknown. Rates as drivers print them (sysfs.c's
    /// `rate_show`: `%d%s Gb/sec (%dX%s)`, `.5` the only fraction; before 5.x
    /// no speed name).
    #[test]
    fn port_labels_render_the_typed_port() {
        let port = |rate: &str, fabric| {
            let mut p = Port::new("1".into());
            p.rate = Ok(Some(format!("{rate}\n")));
            Observation::Port(crate::observe::Port {
                device: "mlx5_0".into(),
                port: 1,
                vf: false,
                active: Some(true),
                link_layer: Some(LinkLayer::InfiniBand),
                rate_gbps: p.rate_gbps(),
                width: p.width(),
                netdev: None,
                netdev_mtu: None,
                port_mtu: None,
                fabric,
            })
        };
        let render = |o: Observation| {
            let mut m = Families::new("x");
            port_info(&mut m, &[o]);
            let text = m.render(Format::Text);
            let line = text.lines().find(|l| l.starts_with("x_port_info{"));
            line.unwrap().to_owned()
        };
        let ib = Some(Fabric::Ib("fe80::".parse().unwrap()));
        assert_eq!(
            render(port("2.5 Gb/sec (1X SDR)", ib)),
            "x_port_info{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\",rate=\"2.5\",width=\"1X\",netdev=\"\",netdev_mtu=\"\",port_mtu=\"\",fabric=\"ib:fe80:0000:0000:0000\"} 1"
        );
        let roce = Some(Fabric::Roce([10, 0, 2, 0].into(), 24));
        let line = render(port("400 Gb/sec (4X NDR)", roce));
        assert!(line.contains("rate=\"400\",width=\"4X\""), "{line}");
        assert!(line.contains("fabric=\"roce:10.0.2.0/24\""), "{line}");
        let line = render(port("10 Gb/sec (4X)", None));
        assert!(line.contains("rate=\"10\",width=\"4X\""), "{line}");
        let line = render(port("fast", None));
        assert!(line.contains("rate=\"\",width=\"\""), "{line}");
        // A VF's port repeats its PF's link: no series.
        let Observation::Port(mut vf) = port("100 Gb/sec (4X EDR)", None) else {
            unreachable!()
        };
        vf.vf = true;
        let mut m = Families::new("x");
        port_info(&mut m, &[Observation::Port(vf)]);
        assert!(!m.render(Format::Text).contains("x_port_info{"));
    }
}
