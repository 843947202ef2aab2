//! rdma.netns: parsers, decisions and the live switch against a fake kernel.
use super::*;
use crate::config::rdma::NetnsSetting;
use crate::engine::effect::EffectKey;
use crate::engine::outcome::ActionStatus;
use nix::errno::Errno;
use std::os::unix::fs::symlink;

fn cfg(mode: NetnsSetting) -> RdmaConfig {
    RdmaConfig {
        netns_mode: mode,
        ..RdmaConfig::default()
    }
}

fn facts(live: Live) -> Facts {
    Facts {
        live,
        osrelease: Some("5.15.0-91-generic".into()),
        ofed_info: None,
        modprobe: None,
        namespaces: Vec::new(),
        plugin_sockets: Vec::new(),
        cmdline: Some("BOOT_IMAGE=/vmlinuz ro quiet".into()),
        initramfs: None,
        initramfs_error: None,
    }
}

fn pod_ns() -> Vec<Namespace> {
    vec![
        Namespace {
            id: "net:[4026532451]".into(),
            holders: vec![Holder {
                pid: 4301,
                comm: "ib_write_bw".into(),
                unit: Some("cri-containerd-0f3a.scope".into()),
            }],
        },
        Namespace {
            id: "/run/netns/cni-1234".into(),
            holders: Vec::new(),
        },
    ]
}

#[test]
fn parsers() {
    assert_eq!(parse_param("Y\n"), Ok(NetnsMode::Shared));
    assert_eq!(parse_param("N\n"), Ok(NetnsMode::Exclusive));
    assert!(
        parse_param("maybe")
            .unwrap_err()
            .contains("expected Y or N")
    );
    assert_eq!(parse_kernel("5.15.0-91-generic"), Some((5, 15)));
    assert_eq!(parse_kernel("4.18.0-553.el8_10.x86_64"), Some((4, 18)));
    assert_eq!(parse_kernel("garbage"), None);
    assert_eq!(
        parse_ofed("#!/bin/bash\necho MLNX_OFED_LINUX-5.8-1.0.1.1:\n"),
        Some((5, 8))
    );
    assert_eq!(parse_ofed("nothing"), None);
    assert_eq!(
        cmdline_mode("ro ib_core.netns_mode=1 ib_core.netns_mode=0"),
        Some("0")
    );
    assert_eq!(
        cgroup_leaf("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-0f3a.scope\n")
            .as_deref(),
        Some("cri-containerd-0f3a.scope")
    );
    assert_eq!(
        initramfs_contents(
            "usr/lib/modules/5.15.0/kernel/drivers/infiniband/core/ib_core.ko.zst\netc/modprobe.d/rdma-node-agent.conf\n",
            Path::new("/etc/modprobe.d/rdma-node-agent.conf")
        ),
        (true, true)
    );
}

#[test]
fn unmanaged_reports_the_live_mode() {
    let d = decide(
        &facts(Live::Mode(NetnsMode::Shared)),
        &cfg(NetnsSetting::Unmanaged),
    );
    assert_eq!(d.check.status, Status::Skipped);
    assert_eq!(d.check.details["mode"], "shared");
    assert!(d.plan.is_empty());
}

#[test]
fn switches_live_when_nothing_blocks() {
    let d = decide(
        &facts(Live::Mode(NetnsMode::Shared)),
        &cfg(NetnsSetting::Exclusive),
    );
    assert_eq!(d.check.status, Status::Fail);
    assert_eq!(d.plan.changes.len(), 1);
    assert_eq!(
        String::from_utf8(d.plan.changes[0].new.clone().unwrap())
            .unwrap()
            .lines()
            .last(),
        Some("options ib_core netns_mode=0")
    );
    assert_eq!(
        d.plan.actions[0].kind.to_string(),
        "set the RDMA netns mode to exclusive"
    );
    assert!(d.reboot_reason.is_none());
}

#[test]
fn blocked_switch_is_a_pending_reboot_naming_the_namespaces() {
    let mut f = facts(Live::Mode(NetnsMode::Shared));
    f.namespaces = pod_ns();
    f.modprobe = Some(modprobe_content(NetnsMode::Exclusive).into_bytes());
    let d = decide(&f, &cfg(NetnsSetting::Exclusive));
    assert!(d.plan.is_empty(), "{:?}", d.plan);
    assert_eq!(d.check.status, Status::Fail);
    assert!(
        d.check.message.starts_with(
            "pending reboot: exclusive is persisted in /etc/modprobe.d/rdma-node-agent.conf, but the live mode is shared"
        ),
        "{}",
        d.check.message
    );
    assert!(
        d.check.message.contains(
            "net:[4026532451] (pid 4301 ib_write_bw in cri-containerd-0f3a.scope); /run/netns/cni-1234"
        ),
        "{}",
        d.check.message
    );
    assert!(d.reboot_reason.is_some());
}

#[test]
fn converged_and_not_loaded_are_ok() {
    let mut f = facts(Live::Mode(NetnsMode::Exclusive));
    f.modprobe = Some(modprobe_content(NetnsMode::Exclusive).into_bytes());
    let d = decide(&f, &cfg(NetnsSetting::Exclusive));
    assert_eq!(d.check.status, Status::Ok, "{}", d.check.message);
    assert!(d.plan.is_empty());
    f.live = Live::NotLoaded;
    let d = decide(&f, &cfg(NetnsSetting::Exclusive));
    assert_eq!(d.check.status, Status::Ok);
    assert!(d.check.message.contains("applies when it loads"));
}

#[test]
fn old_kernels_are_refused_without_ofed() {
    let mut f = facts(Live::Mode(NetnsMode::Shared));
    f.osrelease = Some("4.18.0-553.el8_10.x86_64".into());
    let d = decide(&f, &cfg(NetnsSetting::Exclusive));
    assert_eq!(d.check.status, Status::Fail);
    assert!(
        d.check
            .message
            .contains("kernel 4.18.0-553.el8_10.x86_64 is older than 5.3")
            && d.check.message.contains("MLNX_OFED was not found"),
        "{}",
        d.check.message
    );
    assert!(d.plan.is_empty());
    f.ofed_info = Some("echo MLNX_OFED_LINUX-4.6-1.0.1.1:".into());
    assert!(
        decide(&f, &cfg(NetnsSetting::Exclusive))
            .check
            .message
            .contains("MLNX_OFED 4.6 is too old")
    );
    f.ofed_info = Some("echo MLNX_OFED_LINUX-5.8-1.0.1.1:".into());
    assert!(!decide(&f, &cfg(NetnsSetting::Exclusive)).plan.is_empty());
}

#[test]
fn shared_plugin_refuses_or_warns() {
    let mut f = facts(Live::Mode(NetnsMode::Exclusive));
    f.modprobe = Some(modprobe_content(NetnsMode::Exclusive).into_bytes());
    f.plugin_sockets = vec!["/var/lib/kubelet/device-plugins/rdma_shared_device_a.sock".into()];
    let d = decide(&f, &cfg(NetnsSetting::Exclusive));
    assert_eq!(d.check.status, Status::Fail);
    assert!(
        d.check.message.starts_with("refusing exclusive mode: the RDMA shared device plugin is in use (/var/lib/kubelet/device-plugins/rdma_shared_device_a.sock)"),
        "{}",
        d.check.message
    );
    let warn = RdmaConfig {
        shared_plugin: PluginPolicy::Warn,
        ..cfg(NetnsSetting::Exclusive)
    };
    let d = decide(&f, &warn);
    assert_eq!(d.check.status, Status::Warn);
    assert!(
        d.check
            .message
            .contains("WARNING: the RDMA shared device plugin")
    );
    // Shared mode is what the plugin needs: no conflict.
    f.live = Live::Mode(NetnsMode::Shared);
    f.modprobe = Some(modprobe_content(NetnsMode::Shared).into_bytes());
    assert_eq!(
        decide(&f, &cfg(NetnsSetting::Shared)).check.status,
        Status::Ok
    );
}

#[test]
fn initramfs_and_cmdline() {
    let mut f = facts(Live::Mode(NetnsMode::Exclusive));
    f.modprobe = Some(modprobe_content(NetnsMode::Exclusive).into_bytes());
    f.initramfs = Some(Initramfs {
        has_ib_core: true,
        has_agent_file: false,
        rebuild: vec!["update-initramfs".into(), "-u".into()],
    });
    let d = decide(&f, &cfg(NetnsSetting::Exclusive));
    assert_eq!(d.check.status, Status::Warn);
    assert!(d.check.message.contains("run `update-initramfs -u`"));
    let rebuild = RdmaConfig {
        initramfs: InitramfsPolicy::Rebuild,
        ..cfg(NetnsSetting::Exclusive)
    };
    let d = decide(&f, &rebuild);
    assert_eq!(
        d.plan.actions[0].kind.key(),
        EffectKey::new("rebuild_initramfs", "")
    );
    // Until a rebuild succeeds the check says so: a failing one is not silent.
    assert_eq!(d.check.status, Status::Warn);
    assert!(
        d.check
            .message
            .contains("the next boot keeps the old mode until `update-initramfs -u` succeeds"),
        "{}",
        d.check.message
    );
    f.initramfs.as_mut().unwrap().has_agent_file = true;
    assert_eq!(decide(&f, &rebuild).check.status, Status::Ok);
    f.initramfs = None;
    // A listing tool that fails leaves the question open: said, not hidden.
    f.initramfs_error = Some("`lsinitramfs /boot/initrd.img-6.1.0` failed: bad magic".into());
    let d = decide(&f, &rebuild);
    assert_eq!(d.check.status, Status::Warn);
    assert!(
        d.check.message.contains(
            "cannot tell whether ib_core loads from the initramfs (`lsinitramfs /boot/initrd.img-6.1.0` failed: bad magic)"
        ),
        "{}",
        d.check.message
    );
    f.initramfs_error = None;
    let cmdline = RdmaConfig {
        check_cmdline: true,
        ..cfg(NetnsSetting::Exclusive)
    };
    let d = decide(&f, &cmdline);
    assert_eq!(d.check.status, Status::Fail);
    assert!(d.check.message.contains("lacks ib_core.netns_mode"));
    f.cmdline = Some("ro ib_core.netns_mode=N".into());
    assert_eq!(decide(&f, &cmdline).check.status, Status::Ok);
}

/// Stands in for the kernel: answers a SET with a fixed result.
struct Fake {
    set: Result<(), NetlinkError>,
    mode: NetnsMode,
}

impl RdmaNetlink for Fake {
    fn get_netns_mode(&mut self) -> Result<NetnsMode, NetlinkError> {
        Ok(self.mode)
    }
    fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), NetlinkError> {
        self.set.clone()?;
        self.mode = mode;
        Ok(())
    }
}

fn proc_node() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (pid, ns, comm) in [
        (1, "net:[4026531840]", "systemd"),
        (812, "net:[4026531840]", "containerd"),
        (4301, "net:[4026532451]", "ib_write_bw"),
    ] {
        let d = t.path().join(format!("proc/{pid}/ns"));
        std::fs::create_dir_all(&d).unwrap();
        symlink(ns, d.join("net")).unwrap();
        std::fs::write(
            t.path().join(format!("proc/{pid}/comm")),
            format!("{comm}\n"),
        )
        .unwrap();
    }
    std::fs::write(
        t.path().join("proc/4301/cgroup"),
        "0::/kubepods.slice/cri-containerd-0f3a.scope\n",
    )
    .unwrap();
    std::fs::create_dir_all(t.path().join("run/netns")).unwrap();
    std::fs::write(t.path().join("run/netns/cni-1234"), "").unwrap();
    t
}

#[test]
fn live_set_outcomes() {
    use crate::engine::effect::EffectError;
    let t = proc_node();
    let host = Snapshot::new(crate::host::Host::new(t.path()));
    let c = cfg(NetnsSetting::Exclusive);
    let run = |set| {
        set_live(
            &host,
            &c,
            &mut Fake {
                set,
                mode: NetnsMode::Shared,
            },
            NetnsMode::Exclusive,
        )
    };
    let run = |set| crate::engine::effect::settle(run(set).map_err(EffectError::new));
    assert_eq!(run(Ok(())).0, ActionStatus::Done);
    let (status, detail) = run(Err(crate::host::netlink::kernel_error(
        Errno::EBUSY as i32,
        None,
    )));
    assert_eq!(status, ActionStatus::Pending);
    assert!(
        detail.starts_with("pending reboot: the kernel refused to switch"),
        "{detail}"
    );
    assert!(
        detail.contains(
            "net:[4026532451] (pid 4301 ib_write_bw in cri-containerd-0f3a.scope); /run/netns/cni-1234"
        ) && detail.ends_with("exclusive is persisted in /etc/modprobe.d/rdma-node-agent.conf and applies at the next boot"),
        "{detail}"
    );
    for (errno, want) in [
        (Errno::EPERM, "CAP_NET_ADMIN"),
        (Errno::EINVAL, "older than 5.3"),
        (Errno::EOPNOTSUPP, "does not support"),
    ] {
        let (status, detail) = run(Err(crate::host::netlink::kernel_error(errno as i32, None)));
        assert_eq!(status, ActionStatus::Failed);
        assert!(detail.contains(want), "{errno}: {detail}");
    }
}

#[test]
fn bind_mounted_namespaces_are_named_by_their_mount_point() {
    let mountinfo = "\
25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 25 0:4 net:[4026532600] /run/netns/cni-1234 rw shared:5 - nsfs nsfs rw
41 25 0:4 net:[4026532700] /run/docker/netns/1f2e3d rw shared:6 - nsfs nsfs rw
42 25 0:4 net:[4026532451] /var/lib/pods/held rw - nsfs nsfs rw
43 25 0:4 mnt:[4026532800] /run/some-mnt-ns rw - nsfs nsfs rw
44 25 0:4 net:[4026532900] /run/with\\040space rw - nsfs nsfs rw
";
    assert_eq!(
        nsfs_net_mounts(mountinfo),
        vec![
            ("/run/netns/cni-1234".into(), "net:[4026532600]".into()),
            ("/run/docker/netns/1f2e3d".into(), "net:[4026532700]".into()),
            ("/var/lib/pods/held".into(), "net:[4026532451]".into()),
            ("/run/with space".into(), "net:[4026532900]".into()),
        ]
    );
    // /run/netns is listed by name, and a namespace a process holds is named by
    // the process: only the Docker-style mount is added.
    let t = proc_node();
    std::fs::write(t.path().join("proc/1/mountinfo"), mountinfo).unwrap();
    let host = Snapshot::new(crate::host::Host::new(t.path()));
    assert_eq!(
        describe(&namespaces(&host).unwrap()),
        "net:[4026532451] (pid 4301 ib_write_bw in cri-containerd-0f3a.scope); \
         /run/netns/cni-1234; /run/docker/netns/1f2e3d; /run/with space"
    );
    // Escapes that are not bytes stay as written.
    assert_eq!(
        nsfs_net_mounts("1 1 0:4 net:[1] /a\\777 rw - nsfs nsfs rw")[0].0,
        "/a\\777"
    );
}

#[test]
fn initramfs_rebuild_runs_as_a_transient_unit() {
    use crate::engine::effect::Effect;
    use crate::engine::fakes::{FakeHost, FakeManager};
    use crate::host::stop::Stop;
    let stop = Stop::new();
    let m = FakeManager::new(&[], &stop);
    let host = FakeHost::default();
    let cx = crate::engine::effect::LiveCtx {
        host: &host,
        manager: Some(&m),
        stop: &stop,
    };
    let e = effects::RebuildInitramfs {
        command: vec!["update-initramfs".into(), "-u".into()],
    };
    let ran = e.run(&cx).unwrap();
    assert_eq!(ran.status(), ActionStatus::Done);
    assert_eq!(
        m.calls(),
        [format!(
            "run {}: /usr/sbin/update-initramfs -u",
            effects::INITRAMFS_UNIT
        )]
    );
}
