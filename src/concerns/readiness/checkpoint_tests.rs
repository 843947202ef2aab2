use super::*;

/// Checkpoints written by real kubelets (tests/fixtures/kubelet/PROVENANCE).
const REAL: [(&str, &str); 4] = [
    (
        "gpuops-t4",
        include_str!("../../../tests/fixtures/kubelet/gpuops-t4.json"),
    ),
    (
        "kind-1.37-jetson",
        include_str!("../../../tests/fixtures/kubelet/kind-1.37-jetson.json"),
    ),
    (
        "p100-1.20-numa1-two-gpus",
        include_str!("../../../tests/fixtures/kubelet/p100-1.20-numa1-two-gpus.json"),
    ),
    (
        "p100-1.20-two-pods",
        include_str!("../../../tests/fixtures/kubelet/p100-1.20-two-pods.json"),
    ),
];

#[test]
fn real_kubelet_checksums_are_reproduced() {
    for (name, text) in REAL {
        let cp = Checkpoint::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            cp.computed_checksum().unwrap(),
            cp.checksum,
            "{name}: {}",
            cp.data.spew().unwrap()
        );
    }
}

#[test]
fn spew_rendering_of_a_real_checkpoint() {
    let cp = Checkpoint::parse(REAL[1].1).unwrap();
    let s = cp.data.spew().unwrap();
    assert!(
        s.starts_with(
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)\
             [{PodUID:(string)bf52b2cd-b611-4e79-86b1-280b283185c3 ContainerName:(string)check \
             ResourceName:(string)nvidia.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[tegra]] \
             AllocResp:([]uint8)[10 31 10 22 "
        ),
        "{s}"
    );
    assert!(
        s.ends_with("] RegisteredDevices:(map[string][]string)map[nvidia.com/gpu:[tegra]]}"),
        "{s}"
    );
    assert_eq!(cp.registered().get("nvidia.com/gpu"), Some(&1));
    assert_eq!(
        cp.data.entries.as_ref().unwrap()[0].device_ids.all(),
        ["tegra"]
    );
}

#[test]
fn edits_break_the_checksum() {
    // The last registered GPU's id, one character changed.
    let text = REAL[3].1.replace(
        "ba5ca0294841\"]}},\"Checksum\"",
        "ba5ca0294842\"]}},\"Checksum\"",
    );
    assert_ne!(text, REAL[3].1);
    assert!(!Checkpoint::parse(&text).unwrap().checksum_ok().unwrap());
}

#[test]
fn numa_ids_sort_as_integers_and_v1_lists_parse() {
    let text = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"rdma/x","DeviceIDs":{"10":["b"],"2":["a"]},"AllocResp":null}],"RegisteredDevices":{}},"Checksum":1}"#;
    let s = Checkpoint::parse(text).unwrap().data.spew().unwrap();
    assert!(
        s.contains("map[2:[a] 10:[b]] AllocResp:([]uint8)<nil>}"),
        "{s}"
    );
    assert!(
        s.ends_with("RegisteredDevices:(map[string][]string)map[]}"),
        "{s}"
    );
    let v1 = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"rdma/x","DeviceIDs":["a","b"]}],"RegisteredDevices":{"rdma/x":["a","b"]}},"Checksum":1}"#;
    let cp = Checkpoint::parse(v1).unwrap();
    assert!(
        cp.data
            .spew()
            .unwrap()
            .contains("DeviceIDs:([]string)[a b]")
    );
    assert_eq!(cp.registered().get("rdma/x"), Some(&2));
}

#[test]
fn bad_input_is_a_clear_error() {
    let e = Checkpoint::parse("{\"Data\":").unwrap_err().to_string();
    assert!(
        e.starts_with("not a kubelet device-plugin checkpoint: "),
        "{e}"
    );
    let bad = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"p","AllocResp":"!!"}]},"Checksum":1}"#;
    let e = Checkpoint::parse(bad)
        .unwrap()
        .computed_checksum()
        .unwrap_err()
        .to_string();
    assert!(e.contains("AllocResp of pod p is not base64"), "{e}");
}
