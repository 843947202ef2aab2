//! The agent on a tree built from a real cloud GPU host (tests/fixtures/nodes/gpu-host,
//! see its PROVENANCE): RDMA core built into the kernel, no /lib/modules, no
//! systemd. Built-in modules are reported as built in, from the running kernel.

mod support;

use support::*;

#[test]
fn built_in_rdma_modules_are_reported_as_built_in() {
    let t = node("gpu-host");
    let o = agent(t.path(), &["check", "--json", "--only", "kernel.modules"]);
    let out = stdout(&o);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{}", stderr(&o)));
    let c = check_in(&v, "kernel.modules");
    assert_eq!(c["status"], "ok", "{c}");
    assert_eq!(
        c["message"],
        "ib_core, ib_uverbs, mlx5_core, mlx5_ib, rdma_ucm built into kernel 6.18.44-fc-v657-gpu"
    );
    let modules = c["details"]["modules"].as_array().unwrap();
    let evidence = |m: &str| {
        modules
            .iter()
            .find(|x| x["module"] == m)
            .unwrap_or_else(|| panic!("no {m} in {c}"))["evidence"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(evidence("ib_core"), "/sys/module/ib_core has no initstate");
    assert_eq!(
        evidence("ib_uverbs"),
        "/sys/class/infiniband_verbs is there"
    );
    assert_eq!(evidence("rdma_ucm"), "/dev/infiniband/rdma_cm is there");
    assert_eq!(o.status.code(), Some(0), "{out}");
}

/// A module directory with `initstate` is a loaded module, not a built-in one:
/// without /proc/modules listing it and without /lib/modules, nothing is known.
#[test]
fn a_module_with_initstate_is_not_taken_for_built_in() {
    let t = node("gpu-host");
    write(t.path(), "/sys/module/mlx5_ib/initstate", "live\n");
    let o = agent(t.path(), &["check", "--json", "--only", "kernel.modules"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let c = check_in(&v, "kernel.modules");
    assert_eq!(c["status"], "unknown", "{c}");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains("mlx5_ib is not loaded, and the running kernel does not show it built in")
            && msg.contains("/lib/modules/6.18.44-fc-v657-gpu is not there to read"),
        "{msg}"
    );
}

/// The fixture tree answers as the real host did when the agent ran there
/// (tests/fixtures/nodes/gpu-host-live, recorded on the lent H200 VM): the
/// checks that only read the tree agree in status, and the real host's check
/// exited 0 with honest skips (no containerd, no RDMA NIC).
#[test]
fn the_fixture_tree_answers_as_the_real_host_did() {
    let live: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("nodes/gpu-host-live/check.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(live["ok"], true, "{live}");
    let t = node("gpu-host");
    let here = json(&agent(t.path(), &["check", "--json"]));
    for id in [
        "containerd.memlock",
        "systemd.memlock",
        "kernel.modules",
        "rdma.devices",
        "gpudirect.path",
    ] {
        let (a, b) = (check_in(&live, id), check_in(&here, id));
        assert_eq!(a["status"], b["status"], "{id}: real host {a}\nfixture {b}");
    }
    let m = check_in(&live, "containerd.memlock")["message"].to_string();
    assert!(m.contains("no containerd on this node"), "{m}");
}
