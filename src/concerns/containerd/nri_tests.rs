use crate::concerns::containerd::reasons;
use std::collections::HashMap;

use super::*;

/// As containerd 2.1 asks: no base spec rlimit known.
fn no_base_spec(pod: Option<&api::PodSandbox>, c: &api::Container, t: &Target) -> Verdict {
    adjust(pod, c, &nri::BaseSpec::Unset, t)
}

fn target() -> Target {
    Target {
        memlock: Limit(64 << 20),
        annotations: vec![crate::config::nri::ANNOTATION.into()],
        annotation_namespaces: vec!["rdma-jobs".into()],
    }
}

fn container(devices: &[&str], memlock: Option<(u64, u64)>) -> api::Container {
    api::Container {
        id: "c1".into(),
        linux: Some(api::LinuxContainer {
            devices: devices
                .iter()
                .map(|p| api::LinuxDevice {
                    path: (*p).into(),
                    r#type: "c".into(),
                    major: 1,
                    minor: 3,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        rlimits: memlock
            .map(|(soft, hard)| api::PosixRlimit {
                r#type: "RLIMIT_MEMLOCK".into(),
                soft,
                hard,
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

#[test]
fn rdma_devices_are_uverbs_and_rdma_cm_only() {
    assert!(rdma_device("/dev/infiniband/uverbs0"));
    assert!(rdma_device("/dev/infiniband/uverbs12"));
    assert!(rdma_device("/dev/infiniband/rdma_cm"));
    assert!(!rdma_device("/dev/infiniband/umad0"));
    assert!(!rdma_device("/dev/null"));
    assert!(!rdma_device("/dev/nvidia0"));
}

#[test]
fn a_container_with_uverbs_gets_the_target_soft_and_hard() {
    let t = target();
    let v = no_base_spec(
        None,
        &container(&["/dev/null", "/dev/infiniband/uverbs0"], None),
        &t,
    );
    assert_eq!(
        v,
        Verdict::Adjust {
            reason: "device /dev/infiniband/uverbs0".into()
        }
    );
    let r = response(&v, &t);
    let rl = &r.adjust.unwrap().rlimits;
    assert_eq!(rl.len(), 1);
    assert_eq!(
        (rl[0].r#type.as_str(), rl[0].soft, rl[0].hard),
        ("RLIMIT_MEMLOCK", 64 << 20, 64 << 20)
    );
}

#[test]
fn a_container_without_rdma_devices_is_left_alone() {
    let t = target();
    let v = no_base_spec(None, &container(&["/dev/fuse"], None), &t);
    assert_eq!(v, Verdict::NotRdma);
    assert_eq!(response(&v, &t), api::CreateContainerResponse::default());
    // No linux section at all (a Windows-less runtime still sends none sometimes).
    let bare = api::Container::default();
    assert_eq!(no_base_spec(None, &bare, &t), Verdict::NotRdma);
}

#[test]
fn unlimited_or_higher_explicit_limits_are_kept() {
    let t = target();
    for (soft, hard) in [
        (u64::MAX, u64::MAX),
        (64 << 20, 1 << 40),
        (1 << 30, 1 << 30),
    ] {
        let v = no_base_spec(
            None,
            &container(&["/dev/infiniband/rdma_cm"], Some((soft, hard))),
            &t,
        );
        assert_eq!(v, Verdict::AlreadyEnough { soft, hard });
        assert!(response(&v, &t).adjust.is_none());
    }
}

#[test]
fn an_explicit_lower_limit_is_kept_and_reported_not_raised() {
    let t = target();
    let v = no_base_spec(
        None,
        &container(&["/dev/infiniband/uverbs1"], Some((8 << 20, 8 << 20))),
        &t,
    );
    assert_eq!(
        v,
        Verdict::KeptLower {
            soft: 8 << 20,
            hard: 8 << 20,
            reason: "device /dev/infiniband/uverbs1".into()
        }
    );
    assert!(response(&v, &t).adjust.is_none());
    // A soft limit above and a hard one below is still lower: not raised.
    let v = no_base_spec(
        None,
        &container(&["/dev/infiniband/uverbs1"], Some((1 << 30, 1 << 20))),
        &t,
    );
    assert!(matches!(v, Verdict::KeptLower { .. }), "{v:?}");
}

/// A pod of an allowed namespace (`rdma-jobs`) may ask by annotation, on the
/// pod or the container.
#[test]
fn the_annotation_on_container_or_pod_asks_without_a_device() {
    let t = target();
    let ann = |v: &str| HashMap::from([(crate::config::nri::ANNOTATION.to_owned(), v.to_owned())]);
    let allowed = api::PodSandbox {
        namespace: "rdma-jobs".into(),
        ..Default::default()
    };
    let mut c = container(&[], None);
    c.annotations = ann("true");
    assert!(
        matches!(no_base_spec(Some(&allowed), &c, &t), Verdict::Adjust { reason } if reason.starts_with("container annotation"))
    );
    c.annotations = ann("false");
    assert_eq!(no_base_spec(Some(&allowed), &c, &t), Verdict::NotRdma);
    let pod = api::PodSandbox {
        annotations: ann("yes"),
        ..allowed.clone()
    };
    let plain = container(&[], None);
    assert!(
        matches!(no_base_spec(Some(&pod), &plain, &t), Verdict::Adjust { reason } if reason.starts_with("pod annotation"))
    );
    // Not configured: no effect.
    let none = Target {
        annotations: Vec::new(),
        ..t
    };
    assert_eq!(no_base_spec(Some(&pod), &plain, &none), Verdict::NotRdma);
}

/// Any pod can annotate itself: outside the allowed namespaces (and by
/// default, none allowed) an annotation gets nothing; a device still does.
#[test]
fn annotations_are_heard_only_from_allowed_namespaces() {
    let t = target();
    let ann = HashMap::from([(crate::config::nri::ANNOTATION.to_owned(), "true".to_owned())]);
    let mut c = container(&[], None);
    c.annotations = ann.clone();
    let elsewhere = api::PodSandbox {
        namespace: "default".into(),
        annotations: ann,
        ..Default::default()
    };
    assert_eq!(no_base_spec(Some(&elsewhere), &c, &t), Verdict::NotRdma);
    assert_eq!(no_base_spec(None, &c, &t), Verdict::NotRdma);
    let by_default = Target {
        annotation_namespaces: crate::config::Config::default()
            .containerd
            .nri_annotation_namespaces,
        ..target()
    };
    let allowed = api::PodSandbox {
        namespace: "rdma-jobs".into(),
        ..elsewhere.clone()
    };
    assert_eq!(
        no_base_spec(Some(&allowed), &c, &by_default),
        Verdict::NotRdma
    );
    let device = container(&["/dev/infiniband/uverbs0"], None);
    assert!(matches!(
        no_base_spec(Some(&elsewhere), &device, &t),
        Verdict::Adjust { .. }
    ));
}

/// A handler whose base spec is not known is not raised (it may set a lower
/// limit to keep); the check says so, with the count.
#[test]
fn an_unknown_base_spec_is_not_raised_and_the_check_says_so() {
    let t = target();
    let c = container(&["/dev/infiniband/uverbs0"], None);
    let v = adjust(
        None,
        &c,
        &nri::BaseSpec::Unknown("no reconcile yet".into()),
        &t,
    );
    assert!(
        matches!(&v, Verdict::BaseSpecUnknown { why, .. } if why == "no reconcile yet"),
        "{v:?}"
    );
    assert!(response(&v, &t).adjust.is_none());
    // The container's own explicit limit is known whatever the handler's.
    let own = container(&["/dev/infiniband/uverbs0"], Some((u64::MAX, u64::MAX)));
    assert!(matches!(
        adjust(None, &own, &nri::BaseSpec::Unknown("x".into()), &t),
        Verdict::AlreadyEnough { .. }
    ));
    let status = nri::Status {
        registered: true,
        registrations: 1,
        base_spec_unknown: 2,
        ..Default::default()
    };
    let check = judge(&facts(MemlockVia::Nri, Ok(()), Some(status)));
    assert_eq!(check.status, Status::Warn);
    assert!(
        check
            .message
            .contains("2 RDMA container(s) were not raised")
            && check.message.contains("base spec was not known"),
        "{}",
        check.message
    );
    assert_eq!(check.details["base_spec_unknown"], 2);
}

fn facts(via: MemlockVia, probe: Result<(), String>, plugin: Option<nri::Status>) -> Facts {
    Facts {
        via,
        socket: "/var/run/nri/nri.sock".into(),
        probe,
        plugin: plugin.ok_or_else(|| {
            "no /run/rdma-node-agent/nri.json: the agent's daemon is not running".into()
        }),
        source: String::new(),
    }
}

#[test]
fn nri_alone_without_nri_in_containerd_fails_and_says_how() {
    let c = judge(&facts(
        MemlockVia::Nri,
        Err("no NRI socket at /x".into()),
        None,
    ));
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.reason, Some(reasons::NRI_UNAVAILABLE));
    assert!(
        c.message.contains("disable = false") && c.message.contains("base-spec"),
        "{}",
        c.message
    );
    // In the daemon, a plugin that lost its registration fails too.
    let down = nri::Status {
        registered: false,
        last_error: Some("the runtime closed the NRI connection".into()),
        ..Default::default()
    };
    let c = judge(&facts(MemlockVia::Nri, Ok(()), Some(down)));
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.reason, Some(reasons::NRI_PLUGIN_NOT_REGISTERED));
    assert!(c.message.contains("closed"), "{}", c.message);
}

#[test]
fn registered_is_ok_only_from_the_running_daemon() {
    let up = nri::Status {
        registered: true,
        registrations: 1,
        adjusted: 3,
        ..Default::default()
    };
    let c = judge(&facts(MemlockVia::Nri, Ok(()), Some(up)));
    assert_eq!(c.status, Status::Ok);
    assert!(
        c.message.contains("3 RDMA container(s) adjusted"),
        "{}",
        c.message
    );
    // From a shell with no daemon running: nothing registers, and it says so.
    let c = judge(&facts(MemlockVia::Nri, Ok(()), None));
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.reason, Some(reasons::NRI_PLUGIN_NOT_RUNNING));
    assert!(c.message.contains("daemon is not running"), "{}", c.message);
    // With "both" the base spec still holds: a warning.
    assert_eq!(
        judge(&facts(MemlockVia::Both, Ok(()), None)).status,
        Status::Warn
    );
}

#[test]
fn auto_both_and_base_spec() {
    let c = judge(&facts(MemlockVia::Auto, Err("no NRI socket".into()), None));
    assert_eq!(c.status, Status::Ok);
    assert!(c.message.contains("picked the base spec"), "{}", c.message);
    let c = judge(&facts(MemlockVia::Both, Err("no NRI socket".into()), None));
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.reason, Some(reasons::NRI_UNAVAILABLE));
    assert_eq!(
        judge(&facts(MemlockVia::BaseSpec, Ok(()), None)).status,
        Status::Skipped
    );
}

#[test]
fn the_handlers_base_spec_memlock_counts_as_explicit() {
    // containerd 2.1 shows plugins no rlimits, but applies the base spec's and
    // appends an adjustment after it: a lower one must not be overridden.
    let t = target();
    let c = container(&["/dev/infiniband/uverbs0"], None);
    let v = adjust(None, &c, &nri::BaseSpec::Set((1 << 20, 1 << 20)), &t);
    assert!(
        matches!(v, Verdict::KeptLower { soft, .. } if soft == 1 << 20),
        "{v:?}"
    );
    assert!(response(&v, &t).adjust.is_none());
    let v = adjust(None, &c, &nri::BaseSpec::Set((u64::MAX, u64::MAX)), &t);
    assert!(matches!(v, Verdict::AlreadyEnough { .. }), "{v:?}");
    // What the container itself shows wins over the handler's spec.
    let own = container(&["/dev/infiniband/uverbs0"], Some((u64::MAX, u64::MAX)));
    assert!(matches!(
        adjust(None, &own, &nri::BaseSpec::Set((1, 1)), &t),
        Verdict::AlreadyEnough { .. }
    ));
}
