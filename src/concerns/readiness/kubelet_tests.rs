use super::*;

const JETSON: &str = include_str!("../../../tests/fixtures/kubelet/kind-1.37-jetson.json");

fn facts(checkpoint: Option<&str>, sockets: &[&str]) -> Facts {
    Facts {
        dir: "/var/lib/kubelet/device-plugins".into(),
        dir_exists: true,
        kubelet_socket: true,
        checkpoint: checkpoint.map(str::to_owned),
        sockets: sockets.iter().map(|s| s.to_string()).collect(),
    }
}

fn port(device: &str, active: bool) -> Observation {
    Observation::Port(crate::observe::Port {
        device: device.into(),
        port: 1,
        vf: false,
        active: Some(active),
        rate_gbps: Some(100.0),
        width: Some(4),
        link_layer: Some(crate::host::inventory::port::LinkLayer::InfiniBand),
        netdev: None,
        netdev_mtu: None,
        port_mtu: None,
        fabric: None,
    })
}

/// A checkpoint with an RDMA resource, its checksum computed by the kubelet's algorithm.
fn rdma_checkpoint(devices: &[&str]) -> String {
    let list = devices
        .iter()
        .map(|d| format!("\"{d}\""))
        .collect::<Vec<_>>()
        .join(",");
    let text = format!(
        r#"{{"Data":{{"PodDeviceEntries":null,"RegisteredDevices":{{"nvidia.com/gpu":["GPU-1"],"rdma/hca":[{list}]}}}},"Checksum":0}}"#
    );
    let sum = Checkpoint::parse(&text)
        .unwrap()
        .computed_checksum()
        .unwrap();
    text.replace("\"Checksum\":0", &format!("\"Checksum\":{sum}"))
}

#[test]
fn no_kubelet_is_skipped() {
    let mut f = facts(None, &[]);
    f.kubelet_socket = false;
    let (c, o) = decide(&f, &KubeletConfig::default(), &[], true);
    assert_eq!(c.status, Status::Skipped);
    assert!(
        c.message.starts_with("no kubelet on this node"),
        "{}",
        c.message
    );
    assert!(o.is_empty());
}

#[test]
fn ports_up_but_no_rdma_resource() {
    // A real checkpoint (GPU only) on a host whose RDMA ports are up.
    let (c, o) = decide(
        &facts(Some(JETSON), &["nvidia-gpu.sock"]),
        &KubeletConfig::default(),
        &[port("mlx5_0", true), port("mlx5_1", true)],
        true,
    );
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert!(
        c.message.starts_with(
            "the host has 2 ACTIVE RDMA port(s) but the kubelet advertises no rdma/* device: \
             the device plugin is not running: check its DaemonSet, tolerations and operator wait labels; \
             kubelet advertises nvidia.com/gpu: 1;"
        ),
        "{}",
        c.message
    );
    assert_eq!(c.details["checksum_ok"], true);
    assert_eq!(
        o,
        vec![Observation::KubeletResource {
            name: "nvidia.com/gpu".into(),
            devices: 1,
            rdma: false
        }]
    );
    let cfg = KubeletConfig {
        mismatch: Severity::Fail,
        ..KubeletConfig::default()
    };
    let (c, _) = decide(
        &facts(Some(JETSON), &[]),
        &cfg,
        &[port("mlx5_0", true)],
        true,
    );
    assert_eq!(c.status, Status::Fail);
}

#[test]
fn resource_advertised_while_ports_are_down() {
    let cp = rdma_checkpoint(&["mlx5_0", "mlx5_1"]);
    let sockets = ["rdma_shared_device_a.sock"];
    let (c, _) = decide(
        &facts(Some(&cp), &sockets),
        &KubeletConfig::default(),
        &[port("mlx5_0", false), port("mlx5_1", false)],
        true,
    );
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.message.starts_with(
            "the kubelet advertises rdma/hca (2 devices) but every RDMA port of the host is down \
             (mlx5_0/1, mlx5_1/1): RDMA pods will be scheduled here and fail"
        ),
        "{}",
        c.message
    );
    // Ports up and the resource there: ok.
    let (c, o) = decide(
        &facts(Some(&cp), &sockets),
        &KubeletConfig::default(),
        &[port("mlx5_0", true), port("mlx5_1", false)],
        true,
    );
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(
        c.message,
        "kubelet advertises nvidia.com/gpu: 1, rdma/hca: 2; host: 1 of 2 RDMA port(s) ACTIVE; \
         plugin sockets: rdma_shared_device_a.sock"
    );
    assert!(o.contains(&Observation::KubeletResource {
        name: "rdma/hca".into(),
        devices: 2,
        rdma: true
    }));
    // The plugin's socket is gone.
    let (c, _) = decide(
        &facts(Some(&cp), &[]),
        &KubeletConfig::default(),
        &[port("mlx5_0", true)],
        true,
    );
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.message.starts_with("no device plugin socket in"),
        "{}",
        c.message
    );
}

#[test]
fn expected_resources_and_bad_files() {
    let cfg = KubeletConfig {
        expected_resources: vec!["rdma/hca".into()],
        ..KubeletConfig::default()
    };
    let cp = rdma_checkpoint(&[]);
    let (c, _) = decide(&facts(Some(&cp), &["x.sock"]), &cfg, &[], true);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.message.starts_with("rdma/hca is expected"),
        "{}",
        c.message
    );
    // A corrupt checksum is said, and the content still shown.
    let tampered = JETSON.replace("3660592824", "1");
    let (c, _) = decide(
        &facts(Some(&tampered), &[]),
        &KubeletConfig::default(),
        &[],
        true,
    );
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.message.contains("checksum does not verify"),
        "{}",
        c.message
    );
    // Not JSON: unknown, never ok.
    let (c, _) = decide(&facts(Some("{"), &[]), &KubeletConfig::default(), &[], true);
    assert_eq!(c.status, Status::Unknown);
    assert!(
        c.message.starts_with("cannot tell what the kubelet advertises: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint: not a kubelet"),
        "{}",
        c.message
    );
}
