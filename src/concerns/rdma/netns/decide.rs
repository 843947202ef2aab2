//! rdma.netns: the decision (pure).

use super::*;
use crate::reason::Reason;

pub struct Decision {
    pub check: Check,
    pub plan: Plan,
    /// Only a reboot can apply the mode now.
    pub reboot_reason: Option<String>,
}

fn live_str(live: &Live) -> &str {
    match live {
        Live::NotLoaded => "ib_core not loaded",
        Live::Mode(m) => m.as_str(),
        Live::Unreadable(_) => "unreadable",
    }
}

pub fn decide(f: &Facts, cfg: &RdmaConfig) -> Decision {
    let mut details = json!({
        "configured": format!("{:?}", cfg.netns_mode).to_lowercase(),
        "live": live_str(&f.live),
    });
    if let Live::Mode(m) = f.live {
        details["mode"] = json!(m.as_str());
    }
    let done = |check: Check| Decision {
        check,
        plan: Plan::default(),
        reboot_reason: None,
    };
    let Some(want) = cfg.netns_mode.wanted() else {
        return done(
            Check::new(
                CHECK_ID,
                Status::Skipped,
                format!(
                    "not managed (rdma.netns_mode = \"unmanaged\"); live mode: {}",
                    live_str(&f.live)
                ),
            )
            .with_details(details),
        );
    };

    // Kernels before 5.3 have no netns mode, unless MLNX_OFED 4.7+ backports it.
    let Some(kernel) = f.osrelease.as_deref() else {
        return done(
            Check::new(
                CHECK_ID,
                Status::Unknown,
                "cannot read /proc/sys/kernel/osrelease to tell whether the kernel supports RDMA netns modes",
            )
            .with_reason(Reason::FactUnreadable),
        );
    };
    let ofed = f.ofed_info.as_deref().and_then(parse_ofed);
    if parse_kernel(kernel).is_none_or(|v| v < (5, 3)) && ofed.is_none_or(|v| v < (4, 7)) {
        let found = match ofed {
            Some((a, b)) => format!("MLNX_OFED {a}.{b} is too old"),
            None => format!("MLNX_OFED was not found ({OFED_INFO})"),
        };
        return done(
            Check::new(
                CHECK_ID,
                Status::Fail,
                format!(
                    "refusing to manage the RDMA netns mode: kernel {kernel} is older than 5.3 and {found}; \
                     RDMA netns modes need kernel 5.3+ or MLNX_OFED 4.7+; nothing was changed"
                ),
            )
            .with_reason(Reason::NetnsUnsupported)
            .with_details(details),
        );
    }

    let mut warnings = Vec::new();
    if want == NetnsMode::Exclusive && !f.plugin_sockets.is_empty() {
        let sockets: Vec<String> = f
            .plugin_sockets
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let conflict = format!(
            "the RDMA shared device plugin is in use ({}) and stops working in exclusive mode",
            sockets.join(", ")
        );
        details["shared_plugin"] = json!(sockets);
        match cfg.shared_plugin {
            PluginPolicy::Refuse => {
                return done(
                    Check::new(
                        CHECK_ID,
                        Status::Fail,
                        format!(
                            "refusing exclusive mode: {conflict}; remove the plugin, or set rdma.shared_plugin = \"warn\" to switch anyway"
                        ),
                    )
                    .with_reason(Reason::NetnsPluginConflict)
                    .with_details(details),
                );
            }
            PluginPolicy::Warn => warnings.push(format!("WARNING: {conflict}")),
        }
    }

    let mut plan = Plan::default();
    let mut problems = Vec::new();
    // What the live mode lacks names the failure before what the files lack.
    let mut live_reason = None;
    let mut file_reason = None;
    let file = cfg.modprobe_file.display();
    let content = modprobe_content(want).into_bytes();
    let persisting = f.modprobe.as_deref() != Some(content.as_slice());
    if persisting {
        plan.changes.push(FileChange {
            path: cfg.modprobe_file.clone(),
            old: f.modprobe.clone(),
            new: Some(content),
            mode: 0o644,
            owner: OWNER,
            reason: format!("persist RDMA netns mode {want}"),
            restart: Vec::new(),
        });
        problems.push(format!("{want} mode is not persisted in {file}"));
        file_reason = Some(Reason::NetnsNotPersisted);
    }

    let mut reboot_reason = None;
    let mut status_line = match &f.live {
        Live::NotLoaded => format!("ib_core is not loaded; {want} applies when it loads"),
        Live::Mode(m) if *m == want => format!("{want} (live)"),
        Live::Mode(m) if f.namespaces.is_empty() => {
            plan.actions.push(Action {
                kind: ActionKind::Effect(Arc::new(effects::SetMode {
                    mode: want,
                    cfg: cfg.clone(),
                })),
                reason: format!("live mode is {m}"),
            });
            problems.push(format!("live mode is {m}, want {want}"));
            live_reason = Some(Reason::NetnsModeMismatch);
            String::new()
        }
        Live::Mode(m) => {
            details["blocking_namespaces"] = json!(f.namespaces);
            let why = format!(
                "the live mode is {m} and the kernel refuses to switch while other network namespaces exist: {}",
                describe(&f.namespaces)
            );
            reboot_reason = Some(format!("RDMA netns mode {want} (live: {m})"));
            live_reason = Some(Reason::NetnsBusy);
            details["reboot_required"] = json!(true);
            problems.push(format!(
                "pending reboot: {want} is {} in {file}, but {why}",
                if persisting {
                    "to be persisted"
                } else {
                    "persisted"
                }
            ));
            String::new()
        }
        Live::Unreadable(e) => {
            return done(
                Check::new(CHECK_ID, Status::Unknown, e.clone())
                    .with_reason(Reason::FactUnreadable)
                    .with_details(details),
            );
        }
    };

    if let Some(e) = &f.initramfs_error {
        warnings.push(format!(
            "cannot tell whether ib_core loads from the initramfs ({e}): if it does, the next boot keeps the old mode until the initramfs is rebuilt"
        ));
    }
    if let Some(i) = &f.initramfs {
        details["initramfs_has_ib_core"] = json!(i.has_ib_core);
        if i.has_ib_core && (persisting || !i.has_agent_file) {
            match cfg.initramfs {
                InitramfsPolicy::Rebuild => {
                    plan.actions.push(Action {
                        kind: ActionKind::Effect(Arc::new(effects::RebuildInitramfs {
                            command: i.rebuild.clone(),
                        })),
                        reason: format!("ib_core loads from the initramfs, which lacks {file}"),
                    });
                    // Shown until a rebuild succeeds, so a failing one is not silent.
                    warnings.push(format!(
                        "ib_core loads from the initramfs, which lacks {file}: the next boot keeps the old mode until `{}` succeeds (rdma.initramfs = \"rebuild\")",
                        i.rebuild.join(" ")
                    ));
                }
                InitramfsPolicy::Report => warnings.push(format!(
                    "ib_core loads from the initramfs, which lacks {file}: run `{}` (or set rdma.initramfs = \"rebuild\"), or the next boot keeps the old mode",
                    i.rebuild.join(" ")
                )),
            }
        }
    }

    if cfg.check_cmdline {
        let want_arg = want.wire();
        let found = f.cmdline.as_deref().and_then(cmdline_mode);
        // A bool parameter: 0/1 and N/Y spell the same modes.
        if found.map(parse_param) != Some(Ok(want)) {
            problems.push(format!(
                "the kernel command line {} (rdma.check_cmdline): add ib_core.netns_mode={want_arg} to the boot loader's command line",
                match found {
                    Some(v) => format!("has ib_core.netns_mode={v}"),
                    None => "lacks ib_core.netns_mode".into(),
                }
            ));
            file_reason.get_or_insert(Reason::NetnsNotPersisted);
        }
    }

    let reason = live_reason
        .or(file_reason)
        .unwrap_or(Reason::NetnsInitramfsStale);
    let (status, message) = if !problems.is_empty() {
        let mut m = problems.join("; ");
        if !plan.is_empty() {
            m.push_str(" (run `rdma-node-agent apply`)");
        }
        (Status::Fail, m)
    } else {
        if status_line.is_empty() {
            status_line = format!("{want}");
        }
        status_line.push_str(&format!(", persisted in {file}"));
        if warnings.is_empty() {
            (Status::Ok, status_line)
        } else {
            (
                Status::Warn,
                format!("{status_line}; {}", warnings.join("; ")),
            )
        }
    };
    let message = if status == Status::Fail && !warnings.is_empty() {
        format!("{message}; {}", warnings.join("; "))
    } else {
        message
    };
    plan.notes
        .extend(warnings.iter().filter(|_| status != Status::Fail).cloned());
    Decision {
        check: Check::new(CHECK_ID, status, message)
            .with_reason(reason)
            .with_details(details),
        plan,
        reboot_reason,
    }
}
