//! The RDMA subsystem's network-namespace mode (`rdma.netns_mode`): SR-IOV setups
//! that hand each pod its own VF need `exclusive`.
//!
//! The live mode is read from sysfs (a netlink socket could auto-load ib_core);
//! the mode is persisted in the agent's own modprobe.d file (a ledger-owned file,
//! so `revert` removes it) and switched live over netlink when the kernel allows:
//! it refuses (EBUSY) while any other network namespace exists, and then only a
//! reboot applies it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use super::{InitramfsPolicy, PluginPolicy, RdmaConfig};
use crate::check::{Check, Status};
use crate::engine::outcome::ActionStatus;
use crate::host::snapshot::Snapshot;
use crate::host::{Host, HostError};
use crate::netlink::{NetlinkError, NetnsMode, RdmaNetlink};
use crate::plan::{Action, ActionKind, FileChange, Plan};
use crate::procfs;

pub const CHECK_ID: &str = "rdma.netns";
pub const OWNER: &str = "rdma-netns";
const PARAM: &str = "/sys/module/ib_core/parameters/netns_mode";
/// MLNX_OFED's `ofed_info` is a shell script carrying its version as text,
/// so it is read as a file (fixtures can supply it) rather than run.
const OFED_INFO: &str = "/usr/bin/ofed_info";
const NAMED_NETNS: &str = "/run/netns";
/// The shared device plugin registers under either directory, depending on its mode.
const PLUGIN_DIRS: &[&str] = &[
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/plugins_registry",
];
/// Holders named per namespace in `details` (a namespace can hold many processes).
const HOLDERS_SHOWN: usize = 5;

/// The live mode as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// No `/sys/module/ib_core`: the modprobe.d options apply when it loads.
    NotLoaded,
    Mode(NetnsMode),
    Unreadable(String),
}

/// A network namespace other than the initial one, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Namespace {
    /// `net:[4026532451]`, or `/run/netns/<name>`.
    pub id: String,
    pub holders: Vec<Holder>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    /// The last component of its cgroup (a systemd unit or a container scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// What the initramfs holds, from `lsinitramfs`/`lsinitrd` on the live host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initramfs {
    pub has_ib_core: bool,
    pub has_agent_file: bool,
    /// The command that rebuilds it.
    pub rebuild: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Facts {
    pub live: Live,
    pub osrelease: Option<String>,
    pub ofed_info: Option<String>,
    /// The agent's modprobe.d file as it is now.
    pub modprobe: Option<Vec<u8>>,
    pub namespaces: Vec<Namespace>,
    pub plugin_sockets: Vec<PathBuf>,
    pub cmdline: Option<String>,
    /// `None`: nothing to tell (not the live host, no image, or no listing tool).
    pub initramfs: Option<Initramfs>,
    /// The listing tool failed: whether ib_core loads from the initramfs is unknown.
    pub initramfs_error: Option<String>,
}

// ---------- gather ----------

pub fn gather(host: &Snapshot, cfg: &RdmaConfig) -> Result<Facts, HostError> {
    let live = match host.read_string(Path::new(PARAM)) {
        Ok(Some(t)) => parse_param(&t).map_or_else(Live::Unreadable, Live::Mode),
        Ok(None) => Live::NotLoaded,
        Err(e) => Live::Unreadable(e.to_string()),
    };
    let managed = cfg.netns_mode.wanted().is_some();
    let osrelease = host
        .read_string(Path::new("/proc/sys/kernel/osrelease"))?
        .map(|s| s.trim().to_owned());
    let (initramfs, initramfs_error) = match (&osrelease, managed) {
        (Some(r), true) => match initramfs(host, r, &cfg.modprobe_file) {
            Ok(i) => (i, None),
            Err(e) => (None, Some(e)),
        },
        _ => (None, None),
    };
    Ok(Facts {
        namespaces: if managed {
            namespaces(host)?
        } else {
            Vec::new()
        },
        plugin_sockets: if managed {
            plugin_sockets(host, &cfg.shared_plugin_sockets)?
        } else {
            Vec::new()
        },
        ofed_info: host.read_string(Path::new(OFED_INFO)).ok().flatten(),
        modprobe: host.read(&cfg.modprobe_file)?.map(|d| d.bytes),
        cmdline: host.read_string(Path::new("/proc/cmdline"))?,
        initramfs,
        initramfs_error,
        osrelease,
        live,
    })
}

/// Distinct `/proc/*/ns/net` other than PID 1's, with their holders, then `/run/netns/*`.
pub fn namespaces(host: &Snapshot) -> Result<Vec<Namespace>, HostError> {
    let link = |pid: u32| {
        host.read_link(&procfs::proc_file(pid, "ns/net"))
            .ok()
            .flatten()
            .map(|t| t.to_string_lossy().into_owned())
    };
    let initial = link(1);
    let mut by_ns: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
    for pid in procfs::pids(host)? {
        let Some(ns) = link(pid) else { continue };
        if Some(&ns) == initial.as_ref() {
            continue;
        }
        let holders = by_ns.entry(ns).or_default();
        if holders.len() < HOLDERS_SHOWN {
            holders.push(Holder {
                pid,
                comm: procfs::comm(host, pid).unwrap_or_else(|| "?".into()),
                unit: procfs::read(host, pid, "cgroup").and_then(|c| cgroup_leaf(&c)),
            });
        }
    }
    let mut out: Vec<Namespace> = by_ns
        .into_iter()
        .map(|(id, holders)| Namespace { id, holders })
        .collect();
    out.extend(
        host.list_dir(Path::new(NAMED_NETNS))?
            .into_iter()
            .map(|n| Namespace {
                id: format!("{NAMED_NETNS}/{n}"),
                holders: Vec::new(),
            }),
    );
    Ok(out)
}

fn plugin_sockets(host: &Host, patterns: &[String]) -> Result<Vec<PathBuf>, HostError> {
    let patterns: Vec<glob::Pattern> = patterns
        .iter()
        .filter_map(|p| glob::Pattern::new(p).ok())
        .collect();
    let mut out = Vec::new();
    for dir in PLUGIN_DIRS {
        for name in host.list_dir(Path::new(dir))? {
            if patterns.iter().any(|p| p.matches(&name)) {
                out.push(Path::new(dir).join(name));
            }
        }
    }
    Ok(out)
}

/// Lists the initramfs of the running kernel with the tool of the distribution
/// whose image is there (initramfs-tools or dracut). `Err`: the tool failed, so
/// whether ib_core loads from it is unknown. `Ok(None)`: no image or no tool.
fn initramfs(host: &Host, release: &str, agent_file: &Path) -> Result<Option<Initramfs>, String> {
    let kinds: [(&str, String, Vec<String>); 2] = [
        (
            "lsinitramfs",
            format!("/boot/initrd.img-{release}"),
            vec![
                "update-initramfs".into(),
                "-u".into(),
                "-k".into(),
                release.into(),
            ],
        ),
        (
            "lsinitrd",
            format!("/boot/initramfs-{release}.img"),
            vec![
                "dracut".into(),
                "-f".into(),
                "--kver".into(),
                release.into(),
            ],
        ),
    ];
    for (tool, image, rebuild) in kinds {
        if !host.exists(Path::new(&image)) {
            continue;
        }
        let out = match host.run(tool, &[image.as_str()]) {
            None => continue,
            Some(Ok(out)) => out,
            Some(Err(e)) => return Err(format!("`{tool} {image}`: {e}")),
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "`{tool} {image}` failed: {}",
                stderr.lines().next().unwrap_or("no output").trim()
            ));
        }
        let (has_ib_core, has_agent_file) =
            initramfs_contents(&String::from_utf8_lossy(&out.stdout), agent_file);
        return Ok(Some(Initramfs {
            has_ib_core,
            has_agent_file,
            rebuild,
        }));
    }
    Ok(None)
}

// ---------- parse (pure) ----------

/// `Y` shared, `N` exclusive (a bool module parameter; `1`/`0` accepted too).
pub fn parse_param(text: &str) -> Result<NetnsMode, String> {
    match text.trim() {
        "Y" | "y" | "1" => Ok(NetnsMode::Shared),
        "N" | "n" | "0" => Ok(NetnsMode::Exclusive),
        other => Err(format!("{PARAM} holds {other:?}, expected Y or N")),
    }
}

/// `5.15.0-91-generic` → (5, 15).
pub fn parse_kernel(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The version in `ofed_info`'s text: `MLNX_OFED_LINUX-5.8-1.0.1.1` → (5, 8).
pub fn parse_ofed(text: &str) -> Option<(u32, u32)> {
    let rest = &text[text.find("MLNX_OFED_LINUX-")? + "MLNX_OFED_LINUX-".len()..];
    let mut it = rest.split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// `ib_core.netns_mode=` on the kernel command line (the last one wins).
pub fn cmdline_mode(cmdline: &str) -> Option<&str> {
    cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("ib_core.netns_mode="))
        .next_back()
}

/// The last component of the process's cgroup v2 path (or of any v1 line).
pub fn cgroup_leaf(cgroup: &str) -> Option<String> {
    let line = cgroup
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| cgroup.lines().next())?;
    let path = line.splitn(3, ':').nth(2)?;
    path.rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Whether a listing holds ib_core (any compression) and the agent's file.
pub fn initramfs_contents(listing: &str, agent_file: &Path) -> (bool, bool) {
    let agent = agent_file.to_string_lossy();
    let agent = agent.trim_start_matches('/');
    let mut has = (false, false);
    for l in listing.lines() {
        let l = l.trim().trim_start_matches("./");
        has.0 |= l
            .rsplit('/')
            .next()
            .is_some_and(|f| f.starts_with("ib_core.ko"));
        has.1 |= l.ends_with(agent);
    }
    has
}

pub fn modprobe_content(mode: NetnsMode) -> String {
    format!(
        "# Written by rdma-node-agent (rdma.netns_mode = \"{mode}\"); removed by `rdma-node-agent revert`.\n\
         options ib_core netns_mode={}\n",
        mode.wire()
    )
}

pub fn describe(namespaces: &[Namespace]) -> String {
    namespaces
        .iter()
        .map(|n| {
            if n.holders.is_empty() {
                return n.id.clone();
            }
            let holders: Vec<String> = n
                .holders
                .iter()
                .map(|h| match &h.unit {
                    Some(u) => format!("pid {} {} in {u}", h.pid, h.comm),
                    None => format!("pid {} {}", h.pid, h.comm),
                })
                .collect();
            format!("{} ({})", n.id, holders.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// ---------- decide (pure) ----------

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
        return done(Check::new(
            CHECK_ID,
            Status::Unknown,
            "cannot read /proc/sys/kernel/osrelease to tell whether the kernel supports RDMA netns modes",
        ));
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
                    .with_details(details),
                );
            }
            PluginPolicy::Warn => warnings.push(format!("WARNING: {conflict}")),
        }
    }

    let mut plan = Plan::default();
    let mut problems = Vec::new();
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
    }

    let mut reboot_reason = None;
    let mut status_line = match &f.live {
        Live::NotLoaded => format!("ib_core is not loaded; {want} applies when it loads"),
        Live::Mode(m) if *m == want => format!("{want} (live)"),
        Live::Mode(m) if f.namespaces.is_empty() => {
            plan.actions.push(Action {
                kind: ActionKind::SetRdmaNetnsMode { mode: want },
                reason: format!("live mode is {m}"),
            });
            problems.push(format!("live mode is {m}, want {want}"));
            String::new()
        }
        Live::Mode(m) => {
            details["blocking_namespaces"] = json!(f.namespaces);
            let why = format!(
                "the live mode is {m} and the kernel refuses to switch while other network namespaces exist: {}",
                describe(&f.namespaces)
            );
            reboot_reason = Some(format!("RDMA netns mode {want} (live: {m})"));
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
            return done(Check::new(CHECK_ID, Status::Unknown, e.clone()).with_details(details));
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
                        kind: ActionKind::RebuildInitramfs {
                            command: i.rebuild.clone(),
                        },
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
        }
    }

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
        check: Check::new(CHECK_ID, status, message).with_details(details),
        plan,
        reboot_reason,
    }
}

// ---------- live ----------

/// Switches the live mode and verifies it. On EBUSY names what blocks it: the
/// mode is persisted by the same apply, so it takes effect at the next boot.
pub fn set_live(
    host: &Snapshot,
    cfg: &RdmaConfig,
    nl: &mut dyn RdmaNetlink,
    mode: NetnsMode,
) -> (ActionStatus, String) {
    match nl.set_netns_mode(mode) {
        Ok(()) => match nl.get_netns_mode() {
            Ok(m) if m == mode => (
                ActionStatus::Done,
                format!("the RDMA netns mode is now {mode}"),
            ),
            Ok(m) => (
                ActionStatus::Failed,
                format!("the kernel acknowledged {mode} but reports {m}"),
            ),
            Err(e) => (
                ActionStatus::Failed,
                format!("set {mode}, but cannot read it back: {e}"),
            ),
        },
        Err(e @ NetlinkError::Busy(_)) => {
            let blockers = namespaces(host)
                .map(|n| describe(&n))
                .unwrap_or_else(|e| format!("cannot list them: {e}"));
            (
                ActionStatus::Pending,
                format!(
                    "pending reboot: {e}: {}; {mode} is persisted in {} and applies at the next boot",
                    if blockers.is_empty() {
                        "none visible in /proc or /run/netns (held by open files or bind mounts elsewhere)".to_owned()
                    } else {
                        blockers
                    },
                    cfg.modprobe_file.display()
                ),
            )
        }
        Err(e) => (ActionStatus::Failed, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::NetnsSetting;
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
            d.plan.actions[0].kind,
            ActionKind::SetRdmaNetnsMode {
                mode: NetnsMode::Exclusive
            }
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
        assert!(matches!(
            d.plan.actions[0].kind,
            ActionKind::RebuildInitramfs { .. }
        ));
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
        let t = proc_node();
        let host = Snapshot::new(Host::new(t.path()));
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
        assert_eq!(run(Ok(())).0, ActionStatus::Done);
        let (status, detail) = run(Err(crate::netlink::kernel_error(Errno::EBUSY as i32, None)));
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
            let (status, detail) = run(Err(crate::netlink::kernel_error(errno as i32, None)));
            assert_eq!(status, ActionStatus::Failed);
            assert!(detail.contains(want), "{errno}: {detail}");
        }
    }
}
