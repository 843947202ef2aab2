//! rdma.netns: the decision (pure).

use super::*;
use crate::concerns::rdma::netns::reasons;
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

/// A decision with no plan: the check says all.
fn done(check: Check) -> Decision {
    Decision {
        check,
        plan: Plan::default(),
        reboot_reason: None,
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
    if let Some(refusal) = unsupported(f, &details) {
        return done(refusal);
    }
    let mut d = Draft::new(details);
    if let Some(refusal) = d.plugin_conflict(f, cfg, want) {
        return done(refusal);
    }
    let persisting = d.persist(f, cfg, want);
    let status_line = match d.live(f, cfg, want, persisting) {
        Ok(line) => line,
        Err(unreadable) => {
            return done(
                Check::new(CHECK_ID, Status::Unknown, unreadable)
                    .with_reason(Reason::FACT_UNREADABLE)
                    .with_details(d.details),
            );
        }
    };
    d.initramfs(f, cfg, persisting);
    if cfg.check_cmdline {
        d.cmdline(f, want);
    }
    d.finish(cfg, want, status_line)
}

/// Kernels before 5.3 have no netns mode, unless MLNX_OFED 4.7+ backports it:
/// the refusal (or why it cannot be told), if so.
fn unsupported(f: &Facts, details: &serde_json::Value) -> Option<Check> {
    let Some(kernel) = f.osrelease.as_deref() else {
        return Some(
            Check::new(
                CHECK_ID,
                Status::Unknown,
                "cannot read /proc/sys/kernel/osrelease to tell whether the kernel supports RDMA netns modes",
            )
            .with_reason(Reason::FACT_UNREADABLE),
        );
    };
    let ofed = f.ofed_info.as_deref().and_then(parse_ofed);
    let old_kernel = parse_kernel(kernel).is_none_or(|v| v < (5, 3));
    let old_ofed = ofed.is_none_or(|v| v < (4, 7));
    if !(old_kernel && old_ofed) {
        return None;
    }
    let found = match ofed {
        Some((a, b)) => format!("MLNX_OFED {a}.{b} is too old"),
        None => format!("MLNX_OFED was not found ({OFED_INFO})"),
    };
    Some(
        Check::new(
            CHECK_ID,
            Status::Fail,
            format!(
                "refusing to manage the RDMA netns mode: kernel {kernel} is older than 5.3 and {found}; \
                 RDMA netns modes need kernel 5.3+ or MLNX_OFED 4.7+; nothing was changed"
            ),
        )
        .with_reason(reasons::NETNS_UNSUPPORTED)
        .with_details(details.clone()),
    )
}

/// What the decision found so far, in the order it looks: the plan, the
/// problems (any makes it a failure), the warnings, and the reasons.
struct Draft {
    plan: Plan,
    problems: Vec<String>,
    warnings: Vec<String>,
    details: serde_json::Value,
    // What the live mode lacks names the failure before what the files lack.
    live_reason: Option<Reason>,
    file_reason: Option<Reason>,
    reboot_reason: Option<String>,
}

impl Draft {
    fn new(details: serde_json::Value) -> Draft {
        Draft {
            plan: Plan::default(),
            problems: Vec::new(),
            warnings: Vec::new(),
            details,
            live_reason: None,
            file_reason: None,
            reboot_reason: None,
        }
    }

    /// Exclusive mode stops the RDMA shared device plugin: refused, or a
    /// warning, as `rdma.shared_plugin` says.
    fn plugin_conflict(&mut self, f: &Facts, cfg: &RdmaConfig, want: NetnsMode) -> Option<Check> {
        if want != NetnsMode::Exclusive || f.plugin_sockets.is_empty() {
            return None;
        }
        let sockets: Vec<String> = f
            .plugin_sockets
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let conflict = format!(
            "the RDMA shared device plugin is in use ({}) and stops working in exclusive mode",
            sockets.join(", ")
        );
        self.details["shared_plugin"] = json!(sockets);
        match cfg.shared_plugin {
            PluginPolicy::Refuse => Some(
                Check::new(
                    CHECK_ID,
                    Status::Fail,
                    format!(
                        "refusing exclusive mode: {conflict}; remove the plugin, or set rdma.shared_plugin = \"warn\" to switch anyway"
                    ),
                )
                .with_reason(reasons::NETNS_PLUGIN_CONFLICT)
                .with_details(self.details.clone()),
            ),
            PluginPolicy::Warn => {
                self.warnings.push(format!("WARNING: {conflict}"));
                None
            }
        }
    }

    /// Plans the modprobe file that persists the mode. Returns whether it
    /// must be written.
    fn persist(&mut self, f: &Facts, cfg: &RdmaConfig, want: NetnsMode) -> bool {
        let content = modprobe_content(want).into_bytes();
        if f.modprobe.as_deref() == Some(content.as_slice()) {
            return false;
        }
        self.plan.changes.push(FileChange {
            path: cfg.modprobe_file.clone(),
            old: f.modprobe.clone(),
            new: Some(content),
            mode: 0o644,
            owner: OWNER,
            reason: format!("persist RDMA netns mode {want}"),
            restart: Vec::new(),
        });
        self.problems.push(format!(
            "{want} mode is not persisted in {}",
            cfg.modprobe_file.display()
        ));
        self.file_reason = Some(reasons::NETNS_NOT_PERSISTED);
        true
    }

    /// The live mode: the status line when it is as wanted (empty when it is
    /// not), a switch planned where the kernel allows one, a reboot where it
    /// does not; `Err` with why the mode cannot be read.
    fn live(
        &mut self,
        f: &Facts,
        cfg: &RdmaConfig,
        want: NetnsMode,
        persisting: bool,
    ) -> Result<String, String> {
        let file = cfg.modprobe_file.display();
        match &f.live {
            Live::NotLoaded => Ok(format!(
                "ib_core is not loaded; {want} applies when it loads"
            )),
            Live::Mode(m) if *m == want => Ok(format!("{want} (live)")),
            Live::Mode(m) if f.namespaces.is_empty() => {
                self.plan.actions.push(Action {
                    kind: ActionKind::Effect(Arc::new(effects::SetMode {
                        mode: want,
                        cfg: cfg.clone(),
                    })),
                    reason: format!("live mode is {m}"),
                });
                self.problems.push(format!("live mode is {m}, want {want}"));
                self.live_reason = Some(reasons::NETNS_MODE_MISMATCH);
                Ok(String::new())
            }
            Live::Mode(m) => {
                self.details["blocking_namespaces"] = json!(f.namespaces);
                let why = format!(
                    "the live mode is {m} and the kernel refuses to switch while other network namespaces exist: {}",
                    describe(&f.namespaces)
                );
                self.reboot_reason = Some(format!("RDMA netns mode {want} (live: {m})"));
                self.live_reason = Some(reasons::NETNS_BUSY);
                self.details["reboot_required"] = json!(true);
                self.problems.push(format!(
                    "pending reboot: {want} is {} in {file}, but {why}",
                    if persisting {
                        "to be persisted"
                    } else {
                        "persisted"
                    }
                ));
                Ok(String::new())
            }
            Live::Unreadable(e) => Err(e.clone()),
        }
    }

    /// An ib_core loaded from an initramfs that lacks the modprobe file keeps
    /// the old mode at the next boot: rebuilt or reported, as
    /// `rdma.initramfs` says.
    fn initramfs(&mut self, f: &Facts, cfg: &RdmaConfig, persisting: bool) {
        let file = cfg.modprobe_file.display();
        if let Some(e) = &f.initramfs_error {
            self.warnings.push(format!(
                "cannot tell whether ib_core loads from the initramfs ({e}): if it does, the next boot keeps the old mode until the initramfs is rebuilt"
            ));
        }
        let Some(i) = &f.initramfs else {
            return;
        };
        self.details["initramfs_has_ib_core"] = json!(i.has_ib_core);
        if !(i.has_ib_core && (persisting || !i.has_agent_file)) {
            return;
        }
        match cfg.initramfs {
            InitramfsPolicy::Rebuild => {
                self.plan.actions.push(Action {
                    kind: ActionKind::Effect(Arc::new(effects::RebuildInitramfs {
                        command: i.rebuild.clone(),
                    })),
                    reason: format!("ib_core loads from the initramfs, which lacks {file}"),
                });
                // Shown until a rebuild succeeds, so a failing one is not silent.
                self.warnings.push(format!(
                    "ib_core loads from the initramfs, which lacks {file}: the next boot keeps the old mode until `{}` succeeds (rdma.initramfs = \"rebuild\")",
                    i.rebuild.join(" ")
                ));
            }
            InitramfsPolicy::Report => self.warnings.push(format!(
                "ib_core loads from the initramfs, which lacks {file}: run `{}` (or set rdma.initramfs = \"rebuild\"), or the next boot keeps the old mode",
                i.rebuild.join(" ")
            )),
        }
    }

    /// `rdma.check_cmdline`: the boot loader's command line names the mode.
    fn cmdline(&mut self, f: &Facts, want: NetnsMode) {
        let want_arg = want.wire();
        let found = f.cmdline.as_deref().and_then(cmdline_mode);
        // A bool parameter: 0/1 and N/Y spell the same modes.
        if found.map(parse_param) != Some(Ok(want)) {
            self.problems.push(format!(
                "the kernel command line {} (rdma.check_cmdline): add ib_core.netns_mode={want_arg} to the boot loader's command line",
                match found {
                    Some(v) => format!("has ib_core.netns_mode={v}"),
                    None => "lacks ib_core.netns_mode".into(),
                }
            ));
            self.file_reason.get_or_insert(reasons::NETNS_NOT_PERSISTED);
        }
    }

    /// The check: failed with every problem, else ok (or a warning) with
    /// the live mode and where it is persisted.
    fn finish(self, cfg: &RdmaConfig, want: NetnsMode, mut status_line: String) -> Decision {
        let Draft {
            mut plan,
            problems,
            warnings,
            details,
            live_reason,
            file_reason,
            reboot_reason,
        } = self;
        let file = cfg.modprobe_file.display();
        let reason = live_reason
            .or(file_reason)
            .unwrap_or(reasons::NETNS_INITRAMFS_STALE);
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
}
