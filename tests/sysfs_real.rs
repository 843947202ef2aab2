//! `rdma.devices` on the kernel's real sysfs formats and real device trees:
//! every string Linux 6.1's drivers/infiniband/core/sysfs.c can print for a
//! port (read from Debian's linux-source-6.1 at test time, not retyped), the
//! prometheus/procfs recordings of mlx4/mlx5/hfi1 devices, and the shapes a
//! broken node has (dangling class link, no ports, empty link_layer, no RDMA
//! device at all, an unreadable state).

mod support;

use std::path::Path;

use rdma_node_agent::concerns::rdma::devices;
use rdma_node_agent::host::inventory::port::{
    LinkLayer, PhysState, PortState, parse_link_layer, parse_phys_state, parse_rate, parse_state,
};
use serde_json::Value;
use support::*;

/// The quoted strings between `start` and the next `};` in the C source.
fn c_strings(src: &str, start: &str) -> Vec<String> {
    let from = src
        .find(start)
        .unwrap_or_else(|| panic!("{start} not in sysfs.c"));
    let body = &src[from..from + src[from..].find("};").unwrap()];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_port_string_of_the_kernels_sysfs_c() {
    let Some(dir) = artefacts::dir() else { return };
    let src = std::fs::read_to_string(dir.join("kernel-source/sysfs.c")).unwrap();
    let makefile = std::fs::read_to_string(dir.join("kernel-source/Makefile")).unwrap();
    assert!(
        makefile.contains("VERSION = 6\nPATCHLEVEL = 1\n"),
        "not Linux 6.1"
    );
    assert!(src.contains("sysfs_emit(buf, \"%d: %s\\n\", attr.state,"));
    assert!(src.contains("sysfs_emit(buf, \"%u: %s\\n\", attr.phys_state,"));

    // state_show: state_name[] by value, "UNKNOWN" past it.
    let states = c_strings(&src, "static const char *state_name[]");
    assert_eq!(states, PortState::NAMES);
    for id in 0..states.len() as u32 + 3 {
        let name = states.get(id as usize).map_or("UNKNOWN", String::as_str);
        let printed = format!("{id}: {name}\n");
        assert_eq!(parse_state(&printed), Ok(PortState(id)), "{printed:?}");
    }
    // phys_state_to_str: the table, "<unknown>" past it (and for 0).
    let phys = c_strings(&src, "static const char *phys_state_str[]");
    assert_eq!(phys, PhysState::NAMES);
    assert!(
        phys.contains(&"Phy Test".to_owned()) && phys.contains(&"LinkErrorRecovery".to_owned())
    );
    for id in 0..phys.len() as u32 + 3 {
        let name = phys.get(id as usize).map_or("<unknown>", String::as_str);
        let printed = format!("{id}: {name}\n");
        assert_eq!(parse_phys_state(&printed), Ok(PhysState(id)), "{printed:?}");
    }
    // link_layer_show.
    let layers = c_strings(&src, "static ssize_t link_layer_show");
    assert_eq!(layers, ["InfiniBand", "Ethernet", "Unknown", "%s\\n"]);
    for (l, want) in layers.iter().zip([
        LinkLayer::InfiniBand,
        LinkLayer::Ethernet,
        LinkLayer::Unknown,
    ]) {
        assert_eq!(parse_link_layer(&format!("{l}\n")), Ok(want));
    }
    // rate_show: "%d%s Gb/sec (%dX%s)\n" for every speed (deci-Gb/s) and width.
    let rate_src = &src[src.find("static ssize_t rate_show").unwrap()..];
    let rate_src = &rate_src[..rate_src.find("\n}\n").unwrap()];
    assert!(rate_src.contains("\"%d%s Gb/sec (%dX%s)\\n\""));
    let mut speeds = Vec::new();
    for case in rate_src.split("case IB_SPEED_").skip(1) {
        let speed = case.split('"').nth(1).unwrap().to_owned();
        let deci: u32 = case
            .split("rate = ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .unwrap()
            .parse()
            .unwrap();
        speeds.push((speed, deci));
    }
    assert!(speeds.len() >= 8, "{speeds:?}");
    for (speed, deci) in &speeds {
        for width in [1u32, 2, 4, 8, 12] {
            let rate = deci * width;
            let printed = format!(
                "{}{} Gb/sec ({width}X{speed})\n",
                rate / 10,
                if rate % 10 != 0 { ".5" } else { "" }
            );
            assert_eq!(
                parse_rate(&printed),
                Ok(f64::from(rate) / 10.0),
                "{printed:?}"
            );
        }
    }
}

fn check_of(root: &Path) -> (i32, Value) {
    let o = agent(root, &["check", "--json", "--only", "rdma.devices"]);
    (o.status.code().unwrap(), json(&o)["checks"][0].clone())
}

fn ports(c: &Value) -> Vec<String> {
    c["details"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| {
            d["ports"].as_array().unwrap().iter().map(move |p| {
                format!(
                    "{}/{} {} {} {} {}",
                    d["name"].as_str().unwrap(),
                    p["port"],
                    p["state"],
                    p["phys_state"],
                    p["rate_gbps"],
                    p["link_layer"]
                )
            })
        })
        .collect()
}

#[test]
fn procfs_recordings_of_mlx4_mlx5_and_hfi1() {
    let (code, c) = check_of(&fixtures().join("sysfs/procfs"));
    assert_eq!(code, 0, "{c}");
    assert_eq!(
        ports(&c),
        [
            "hfi1_0/1 \"ACTIVE\" \"LinkUp\" 100.0 \"InfiniBand\"",
            "mlx4_0/1 \"ACTIVE\" \"LinkUp\" 40.0 \"InfiniBand\"",
            "mlx4_0/2 \"ACTIVE\" \"LinkUp\" 40.0 \"InfiniBand\"",
            // "4: ACTIVE" is not a phys_state the kernel prints, but 4 is its
            // ABI (as node_exporter reads it): read by the number, text noted.
            "mlx5_0/1 \"ACTIVE\" \"PortConfigurationTraining\" 25.0 \"InfiniBand\"",
        ]
    );
    assert_eq!(c["status"], "ok", "{c}");
    assert_eq!(c["message"], "3 RDMA device(s), 4/4 port(s) ACTIVE");
    let d = &c["details"]["devices"];
    assert_eq!(
        d[2]["notes"],
        serde_json::json!([
            "mlx5_0/1 phys_state: \"4: ACTIVE\" read as 4 (the kernel prints \"4: PortConfigurationTraining\")"
        ])
    );
    assert_eq!(
        d[0]["board_id"],
        "HPE 100Gb 1-port OP101 QSFP28 x16 PCIe Gen3 with Intel Omni-Path Adapter"
    );
    assert_eq!(d[0]["hca_type"], Value::Null);
    assert_eq!(d[1]["fw_ver"], "2.31.5050");
    assert_eq!(d[2]["node_guid"], "0a7f:bc12:45ef:d23b");
}

/// A copy of the procfs tree to break.
fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("sysfs/procfs"), t.path());
    t
}

const CLASS: &str = "sys/class/infiniband";

#[test]
fn broken_shapes_of_a_node() {
    let t = tree();
    let r = t.path();
    let ib = r.join(CLASS);
    // mlx5_0: the phys_state the kernel would print, and an empty link_layer.
    std::fs::write(ib.join("mlx5_0/ports/1/phys_state"), "5: LinkUp\n").unwrap();
    std::fs::write(ib.join("mlx5_0/ports/1/link_layer"), "\n").unwrap();
    // hfi1_0: no ports left. mlx5_1: a class link to a device that is gone.
    std::fs::remove_dir_all(ib.join("hfi1_0/ports/1")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:03.0/infiniband/mlx5_1",
        ib.join("mlx5_1"),
    )
    .unwrap();
    let (code, c) = check_of(r);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["status"], "warn");
    assert_eq!(
        c["message"],
        "4 RDMA device(s) (1 without ports; 1 broken link(s)), 3/3 port(s) ACTIVE; \
         hfi1_0 has no ports; mlx5_1: broken link (/sys/class/infiniband/mlx5_1 points to \
         /sys/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_1, which does not exist)"
    );
    assert_eq!(c["details"]["active_ports"]["unknown"], 1, "{c}");

    // With the broken device expected, the check fails naming it.
    write(
        r,
        "/etc/rdma-node-agent/config.toml",
        "[[rdma.expect_port]]\ndevice = \"mlx5_1\"\n",
    );
    let (code, c) = check_of(r);
    assert_eq!(code, 1, "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("mlx5_1: broken link"),
        "{c}"
    );
}

#[test]
fn an_unreadable_state_is_unknown_not_down() {
    let t = tree();
    let r = t.path();
    std::fs::write(r.join(CLASS).join("mlx4_0/ports/2/state"), [0xff, 0xfe]).unwrap();
    write(
        r,
        "/etc/rdma-node-agent/config.toml",
        "[[rdma.expect_port]]\ndevice = \"mlx4_0\"\n",
    );
    let (code, c) = check_of(r);
    assert_eq!(code, 2, "could not tell: {c}");
    assert_eq!(c["status"], "unknown");
    assert_eq!(
        c["message"],
        "mlx4_0/2 state is unreadable, expected ACTIVE"
    );
}

#[test]
fn no_rdma_device_at_all_is_skipped_or_fails_when_expected() {
    let t = tempfile::tempdir().unwrap();
    let (code, c) = check_of(t.path());
    assert_eq!(code, 0);
    assert_eq!(c["status"], "skipped", "{c}");
    let o = agent(t.path(), &["check", "--only", "rdma.devices"]);
    assert_eq!(
        stdout(&o).lines().next().unwrap(),
        "RDMA host ready: 0 ok, 1 skipped"
    );
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[rdma.min_active_ports]\nInfiniBand = 2\n",
    );
    let (code, c) = check_of(t.path());
    assert_eq!(code, 1);
    assert_eq!(
        c["message"],
        "0 ACTIVE InfiniBand port(s), expected at least 2"
    );
}

#[test]
fn the_library_reads_the_same_tree() {
    let host = rdma_node_agent::host::Host::new(fixtures().join("sysfs/procfs"));
    let devices: Vec<_> = devices::gather(&rdma_node_agent::host::snapshot::Snapshot::new(
        host.clone(),
    ))
    .unwrap();
    let mlx4 = &devices[1];
    assert_eq!(mlx4.ports[1].rate_bytes_per_second(), Some(5_000_000_000));
    assert_eq!(mlx4.ports[1].active(), Some(true));
}
