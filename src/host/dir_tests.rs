use super::*;
use std::fs;
use std::os::unix::fs::symlink;

/// Every answer a `Dir` gives is the one the path-based `Host` call gives.
#[test]
fn answers_as_the_path_based_calls_do() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    fs::create_dir_all(r.join("sys/devices/pci0/dev/ports/1")).unwrap();
    fs::create_dir_all(r.join("sys/class/ib")).unwrap();
    fs::write(r.join("sys/devices/pci0/dev/fw"), "1.2\n").unwrap();
    fs::write(r.join("sys/devices/pci0/dev/ports/1/state"), "4: ACTIVE\n").unwrap();
    fs::write(r.join("sys/devices/pci0/vendor"), "0x15b3\n").unwrap();
    fs::write(r.join("sys/devices/pci0/dev/bad"), [0xff]).unwrap();
    symlink("../../devices/pci0/dev", r.join("sys/class/ib/dev")).unwrap();
    symlink("../../devices/nope", r.join("sys/class/ib/gone")).unwrap();
    // Links out of the directory: both take the path-based call.
    symlink("../vendor", r.join("sys/devices/pci0/dev/up")).unwrap();
    symlink("/sys/devices/pci0", r.join("sys/devices/pci0/dev/abs")).unwrap();
    symlink("ports/1", r.join("sys/devices/pci0/dev/p1")).unwrap();
    symlink("loop", r.join("sys/devices/pci0/dev/loop")).unwrap();

    let h = Host::new(r);
    assert_eq!(
        h.open_dir(Path::new("/sys/class/ib/gone"))
            .unwrap()
            .unwrap_err(),
        PathBuf::from("/sys/devices/nope")
    );
    let d = h.open_dir(Path::new("/sys/class/ib/dev")).unwrap().unwrap();
    assert!(d.fd.is_some(), "openat2 is in every kernel this runs on");
    assert_eq!(d.path(), Path::new("/sys/devices/pci0/dev"));
    let full = |rel: &str| d.path().join(rel);
    for rel in [
        "fw",
        "ports/1/state",
        "up",
        "abs/vendor",
        "p1/state",
        "absent",
        "fw/x",
        "ports",
        "../vendor",
        "loop",
    ] {
        assert_eq!(
            format!("{:?}", d.read_string(rel)),
            format!("{:?}", h.read_string(&full(rel))),
            "{rel}"
        );
    }
    assert!(matches!(
        d.read_string("bad"),
        Err(HostError::NotUtf8 { .. })
    ));
    for rel in ["ports", "ports/1", "p1", "abs", "absent", "fw"] {
        assert_eq!(
            format!("{:?}", d.list(rel)),
            format!("{:?}", h.list_dir(&full(rel))),
            "{rel}"
        );
    }
    assert_eq!(d.list("ports").unwrap(), vec!["1"]);
    for name in [
        "fw",
        "up",
        "abs",
        "absent",
        "ports/1",
        "p1/state",
        "../vendor",
    ] {
        assert_eq!(d.exists(name), h.exists(&full(name)), "{name}");
    }
    // A real directory in a resolved one: its parent is that one resolved.
    let p = h
        .open_subdir(Path::new("/sys/class/ib/dev"), "ports")
        .unwrap();
    assert_eq!(p.path(), Path::new("/sys/devices/pci0/dev/ports"));
    assert_eq!(p.list("").unwrap(), vec!["1"]);
    assert!(p.exists_beside("fw") && p.exists_beside("up") && !p.exists_beside("absent"));
    // Not a link, not absent, not a file.
    for name in ["p1", "absent", "fw"] {
        assert!(
            h.open_subdir(Path::new("/sys/class/ib/dev"), name)
                .is_none(),
            "{name}"
        );
    }
    // A sysfs-shaped link, opened by its lexical target.
    let class = h.open_dir(Path::new("/sys/class/ib")).unwrap().unwrap();
    let l = class.open_link("dev", None).unwrap();
    assert_eq!(l.path(), Path::new("/sys/devices/pci0/dev"));
    assert_eq!(l.read_string("fw").unwrap().as_deref(), Some("1.2\n"));
    let l = class.open_link("dev", Some("ports")).unwrap();
    assert_eq!(l.path(), Path::new("/sys/devices/pci0/dev/ports"));
    assert_eq!(l.list("").unwrap(), vec!["1"]);
    // Dangling, not a link, a link on the way, absolute, above the root: not this way.
    fs::create_dir_all(r.join("sys/class/ib/plain")).unwrap();
    symlink("../../devices/pci0/dev/p1", r.join("sys/class/ib/via")).unwrap();
    symlink("/sys/devices/pci0/dev", r.join("sys/class/ib/abs")).unwrap();
    symlink(
        "../../../../../sys/devices/pci0/dev",
        r.join("sys/class/ib/high"),
    )
    .unwrap();
    symlink("../../devices/./pci0/dev", r.join("sys/class/ib/dot")).unwrap();
    for name in ["gone", "plain", "via", "abs", "high", "dot", "absent"] {
        assert!(class.open_link(name, None).is_none(), "{name}");
    }
    assert!(
        class.open_link("dev", Some("p1")).is_none(),
        "a link as sub"
    );
    assert!(
        class.open_link("dev", Some("fw")).is_none(),
        "a file as sub"
    );
    // Without a descriptor (a kernel without openat2) the same, by path.
    let by_path = Dir {
        host: &h,
        path: d.path().to_owned(),
        fd: None,
        readable: false,
    };
    assert_eq!(by_path.read_string("fw").unwrap().as_deref(), Some("1.2\n"));
    assert_eq!(by_path.list("ports").unwrap(), vec!["1"]);
    assert!(by_path.exists("up"));
    assert!(by_path.exists_beside("dev") && !by_path.exists_beside("fw"));
}

/// From a device's `ports/` (opened from its class link), the device's own
/// files, links and entries read as `../<name>` answer as the path-based calls
/// on the device's directory do: a file, a link in it (followed by the path
/// call), a link out of the root, absent, a directory, a file that is not
/// UTF-8, the `device` link and `physfn` (a link, a plain file, absent).
#[test]
fn beside_answers_as_the_path_based_calls_do() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let dev = r.join("sys/devices/pci0/0000:01:00.1/infiniband/mlx5_1");
    fs::create_dir_all(dev.join("ports/1")).unwrap();
    fs::create_dir_all(dev.join("power")).unwrap();
    fs::create_dir_all(r.join("sys/devices/pci0/0000:01:00.1/net/eth1")).unwrap();
    fs::create_dir_all(r.join("sys/devices/pci0/0000:01:00.0")).unwrap();
    fs::create_dir_all(r.join("sys/class/ib")).unwrap();
    fs::write(dev.join("node_guid"), "0c42:a103:0065:6a3c\n").unwrap();
    fs::write(dev.join("bad"), [0xff]).unwrap();
    fs::write(r.join("sys/devices/pci0/0000:01:00.1/vendor"), "0x15b3\n").unwrap();
    symlink("node_guid", dev.join("guid_link")).unwrap();
    symlink("/etc/hostname", dev.join("out")).unwrap();
    symlink("../../../0000:01:00.1", dev.join("device")).unwrap();
    symlink(
        "../0000:01:00.0",
        r.join("sys/devices/pci0/0000:01:00.1/physfn"),
    )
    .unwrap();
    fs::write(r.join("sys/devices/pci0/0000:01:00.0/physfn"), "").unwrap();
    symlink(
        "../../devices/pci0/0000:01:00.1/infiniband/mlx5_1",
        r.join("sys/class/ib/mlx5_1"),
    )
    .unwrap();

    let h = Host::new(r);
    let class = h.open_dir(Path::new("/sys/class/ib")).unwrap().unwrap();
    let ports = class.open_link("mlx5_1", Some("ports")).unwrap();
    let real = Path::new("/sys/devices/pci0/0000:01:00.1/infiniband/mlx5_1");
    assert_eq!(ports.path(), real.join("ports"));
    assert_eq!(ports.list("").unwrap(), ["1"]);
    for name in [
        "node_guid",
        "guid_link",
        "out",
        "absent",
        "power",
        "bad",
        "device",
    ] {
        assert_eq!(
            format!("{:?}", ports.read_beside(name)),
            format!("{:?}", h.read_string(&real.join(name))),
            "{name}"
        );
    }
    // Not one name: the path-based call, with the same answer.
    assert_eq!(
        format!("{:?}", ports.read_beside("ports/1")),
        format!("{:?}", h.read_string(&real.join("ports/1")))
    );
    let net = ports.open_link_beside("device", Some("net")).unwrap();
    assert_eq!(net.path(), Path::new("/sys/devices/pci0/0000:01:00.1/net"));
    assert_eq!(net.list("").unwrap(), ["eth1"]);
    assert_eq!(
        net.entry_beside("physfn"),
        Entry::Link(PathBuf::from("../0000:01:00.0"))
    );
    assert_eq!(net.entry_beside("vendor"), Entry::Other);
    assert_eq!(net.entry_beside("absent"), Entry::Absent);
    let pf = h
        .open_dir(Path::new("/sys/devices/pci0/0000:01:00.0"))
        .unwrap()
        .unwrap();
    assert_eq!(pf.entry("physfn"), Entry::Other);
    assert_eq!(pf.entry("absent"), Entry::Absent);
    // Each as `exists` says, and without a descriptor the same, by path.
    for name in ["physfn", "vendor", "absent", "net"] {
        assert_eq!(
            net.entry_beside(name) != Entry::Absent,
            net.exists_beside(name),
            "{name}"
        );
    }
    let by_path = Dir {
        host: &h,
        path: net.path().to_owned(),
        fd: None,
        readable: false,
    };
    for name in ["physfn", "vendor", "absent"] {
        assert_eq!(by_path.entry_beside(name), net.entry_beside(name), "{name}");
    }
    let by_path = Dir {
        host: &h,
        path: ports.path().to_owned(),
        fd: None,
        readable: false,
    };
    for name in ["node_guid", "guid_link", "absent", "power"] {
        assert_eq!(
            format!("{:?}", by_path.read_beside(name)),
            format!("{:?}", ports.read_beside(name)),
            "{name}"
        );
    }
    // Links that are not sysfs-shaped, or no link: not this way.
    assert!(ports.open_link_beside("out", None).is_none());
    assert!(ports.open_link_beside("node_guid", None).is_none());
    assert!(ports.open_link_beside("../device", None).is_none());
    assert!(ports.open_link_beside("device", Some("vendor")).is_none());
}

/// The same on the kernel's own sysfs (kernfs: its link texts, its
/// `openat2`), where the machine has one: the live root's network class.
#[test]
fn answers_on_the_live_sysfs_as_the_path_based_calls_do() {
    let h = Host::new("/");
    let class = Path::new("/sys/class/net");
    let Ok(Ok(c)) = h.open_dir(class) else {
        println!("no {} here: nothing to compare", class.display());
        return;
    };
    let names = h.list_dir(class).unwrap();
    for name in &names {
        let full = class.join(name);
        let Some(d) = c.open_link(name, None) else {
            // Only a link of another shape may take the long way.
            let raw = h.read_link(&full).unwrap();
            assert!(
                raw.as_ref().is_none_or(|t| t.is_absolute()),
                "{name}: {raw:?}"
            );
            continue;
        };
        assert_eq!(d.path(), h.resolve(&full).unwrap(), "{name}");
        for attr in ["address", "mtu", "type", "ifindex", "absent"] {
            assert_eq!(
                d.read_string(attr).unwrap(),
                h.read_string(&d.path().join(attr)).unwrap(),
                "{name}/{attr}"
            );
        }
        assert_eq!(
            d.list("queues").unwrap(),
            h.list_dir(&full.join("queues")).unwrap()
        );
        // A real device: its `device` link, and a directory of the function.
        if let Some(sub) = d.open_link("device", Some("power")) {
            let dev = h.resolve(&d.path().join("device")).unwrap();
            assert_eq!(sub.path(), dev.join("power"), "{name}");
            assert_eq!(sub.exists_beside("uevent"), h.exists(&dev.join("uevent")));
            assert_eq!(
                sub.list("").unwrap(),
                h.list_dir(&dev.join("power")).unwrap()
            );
        }
    }
    println!("compared {} devices of {}", names.len(), class.display());
}
