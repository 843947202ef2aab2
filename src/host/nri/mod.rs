//! containerd's Node Resource Interface (NRI): this agent as an external NRI
//! plugin on containerd's NRI socket. The wire: `mux` (two logical connections
//! on one socket), ttrpc on each (the `ttrpc` crate), NRI's protobufs in `api`
//! (proto/nri/api.proto, compiled by build.rs). `plugin` runs one registration
//! and serves the runtime's calls through a [`Handler`]; what to adjust is the
//! caller's pure decision.

pub mod mux;
pub mod plugin;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::Host;

/// NRI's messages (package `nri.pkg.api.v1alpha1`).
#[allow(clippy::all, missing_docs)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

/// containerd's default NRI socket (nri pkg/api/plugin.go `DefaultSocketPath`).
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";

/// The event mask bit of an NRI event (nri pkg/api/event.go: `1 << (e - 1)`).
pub fn event_bit(e: api::Event) -> i32 {
    1 << ((e as i32) - 1)
}

/// What the runtime asks of the plugin. Pure answers: no I/O, no waiting.
pub trait Handler: Send + Sync + 'static {
    /// The runtime's existing pods and containers at registration; no updates
    /// are returned (a running container's rlimits cannot change).
    fn synchronize(&self, pods: &[api::PodSandbox], containers: &[api::Container]);
    /// A container about to be created: its adjustment, if any.
    fn create_container(&self, req: &api::CreateContainerRequest) -> api::CreateContainerResponse;
}

/// The plugin's state, shared between its task and the daemon's reconcile.
#[derive(Debug, Default)]
pub struct State {
    registered: AtomicBool,
    registrations: AtomicU64,
    adjusted: AtomicU64,
    kept_lower: AtomicU64,
    base_spec_unknown: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Where every change is published for `check` from a shell (the daemon).
    publish: OnceLock<Host>,
    /// Each CRI handler's base-spec RLIMIT_MEMLOCK (from the last reconcile
    /// that saw containerd's view), and the default handler's name; `None`
    /// until one did.
    base_specs: Mutex<Option<BaseSpecs>>,
}

/// Soft and hard limits, in bytes.
pub type Limits = (u64, u64);

/// Each handler's base-spec memlock, and the default handler's name.
#[derive(Debug, Default)]
struct BaseSpecs {
    by_handler: HashMap<String, Option<Limits>>,
    default: String,
}

/// A runtime handler's base-spec RLIMIT_MEMLOCK, as the plugin knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseSpec {
    /// Its base spec sets none (or it has no base spec).
    Unset,
    /// Its base spec sets these (soft, hard).
    Set(Limits),
    /// Not known, and why: nothing is raised over a limit the operator may have set.
    Unknown(String),
}

/// Where the daemon publishes its plugin's [`Status`], for `check` run from a
/// shell (node-problem-detector's): volatile, so a reboot forgets it.
pub const STATUS_FILE: &str = "/run/rdma-node-agent/nri.json";

/// A copy of [`State`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Registered with the runtime and synchronized, and the connection is up.
    pub registered: bool,
    /// Successful registrations since the daemon started (a containerd restart adds one).
    pub registrations: u64,
    /// Containers whose RLIMIT_MEMLOCK the plugin raised.
    pub adjusted: u64,
    /// RDMA containers left with an explicit lower limit (reported, not raised).
    pub kept_lower: u64,
    /// RDMA containers not raised because their handler's base spec was not known.
    #[serde(default)]
    pub base_spec_unknown: u64,
    /// Why the last connection failed or ended, if it did.
    pub last_error: Option<String>,
}

/// The published file: the status and which process wrote it.
#[derive(Serialize, Deserialize)]
struct Published {
    pid: u32,
    /// The writer's start time in clock ticks (/proc/<pid>/stat), so a reused
    /// pid is not taken for the daemon.
    start_ticks: u64,
    #[serde(flatten)]
    status: Status,
}

/// A process's start time in ticks, from its /proc/<pid>/stat as read.
fn start_ticks(stat: super::Result<Option<String>>) -> Option<u64> {
    super::procfs::parse_start_ticks(&stat.ok()??)
}

/// What a process other than the daemon knows of its plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Daemon {
    /// The running daemon's plugin, as it last published it.
    Running { pid: u32, status: Status },
    /// No running daemon has published a status: why.
    NotRunning(String),
}

/// Reads what the running daemon published (under the root).
pub fn published(host: &super::read::ReadHost) -> Daemon {
    let bytes = match host.state_read(Path::new(STATUS_FILE)) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Daemon::NotRunning(format!(
                "no {STATUS_FILE}: the agent's daemon (`serve`, rdma-node-agent.service) is not running or runs no NRI plugin"
            ));
        }
        Err(e) => return Daemon::NotRunning(format!("cannot read {STATUS_FILE}: {e}")),
    };
    let Ok(p) = serde_json::from_slice::<Published>(&bytes) else {
        return Daemon::NotRunning(format!("{STATUS_FILE} is not the daemon's status"));
    };
    if start_ticks(host.read_string(&super::procfs::proc_file(p.pid, "stat")))
        != Some(p.start_ticks)
    {
        return Daemon::NotRunning(format!(
            "the daemon that wrote {STATUS_FILE} (pid {}) is no longer running",
            p.pid
        ));
    }
    Daemon::Running {
        pid: p.pid,
        status: p.status,
    }
}

impl State {
    /// Publishes every change to [`STATUS_FILE`] under `host`'s root.
    pub fn publish_to(&self, host: Host) {
        let _ = self.publish.set(host);
        self.publish();
    }

    fn publish(&self) {
        let Some(host) = self.publish.get() else {
            return;
        };
        let pid = std::process::id();
        let Some(ticks) = start_ticks(host.read_string(&super::procfs::proc_file(pid, "stat")))
        else {
            return;
        };
        let p = Published {
            pid,
            start_ticks: ticks,
            status: self.status(),
        };
        let bytes = serde_json::to_vec_pretty(&p).expect("status serializes");
        if let Err(e) = host.state_write(Path::new(STATUS_FILE), &bytes, 0o644) {
            tracing::warn!("cannot publish the NRI plugin's status: {e}");
        }
    }

    pub fn status(&self) -> Status {
        Status {
            registered: self.registered.load(Ordering::Relaxed),
            registrations: self.registrations.load(Ordering::Relaxed),
            adjusted: self.adjusted.load(Ordering::Relaxed),
            kept_lower: self.kept_lower.load(Ordering::Relaxed),
            base_spec_unknown: self.base_spec_unknown.load(Ordering::Relaxed),
            last_error: self.last_error.lock().expect("nri state").clone(),
        }
    }

    /// What the last reconcile found: (handler, is the default, base-spec
    /// memlock). Nothing found (containerd's view missing this time) keeps the
    /// last good table: forgetting it would raise over an operator's lower limit.
    pub fn set_base_specs(
        &self,
        handlers: impl IntoIterator<Item = (String, bool, Option<Limits>)>,
    ) {
        let mut specs = BaseSpecs::default();
        for (name, is_default, memlock) in handlers {
            if is_default {
                specs.default = name.clone();
            }
            specs.by_handler.insert(name, memlock);
        }
        if specs.by_handler.is_empty() {
            return;
        }
        *self.base_specs.lock().expect("nri state") = Some(specs);
    }

    /// Whether a reconcile has told the plugin the handlers' base specs.
    pub fn base_specs_known(&self) -> bool {
        self.base_specs.lock().expect("nri state").is_some()
    }

    /// The base-spec memlock of a pod's runtime handler ("": the default).
    pub fn base_spec_memlock(&self, handler: &str) -> BaseSpec {
        let specs = self.base_specs.lock().expect("nri state");
        let Some(specs) = specs.as_ref() else {
            return BaseSpec::Unknown(
                "no reconcile has read containerd's runtime handlers and base specs yet".into(),
            );
        };
        let name = if handler.is_empty() {
            specs.default.as_str()
        } else {
            handler
        };
        match specs.by_handler.get(name) {
            Some(Some(l)) => BaseSpec::Set(*l),
            Some(None) => BaseSpec::Unset,
            None => BaseSpec::Unknown(format!(
                "runtime handler {name:?} was not among containerd's handlers at the last reconcile"
            )),
        }
    }

    pub fn count_adjusted(&self) {
        self.adjusted.fetch_add(1, Ordering::Relaxed);
        self.publish();
    }

    pub fn count_base_spec_unknown(&self) {
        self.base_spec_unknown.fetch_add(1, Ordering::Relaxed);
        self.publish();
    }

    pub fn count_kept_lower(&self) {
        self.kept_lower.fetch_add(1, Ordering::Relaxed);
        self.publish();
    }

    pub(crate) fn set_registered(&self, yes: bool) {
        let was = self.registered.swap(yes, Ordering::Relaxed);
        if yes && !was {
            self.registrations.fetch_add(1, Ordering::Relaxed);
            *self.last_error.lock().expect("nri state") = None;
        }
        if yes != was {
            self.publish();
        }
    }

    pub fn set_error(&self, e: String) {
        self.registered.store(false, Ordering::Relaxed);
        let mut last = self.last_error.lock().expect("nri state");
        let changed = last.as_deref() != Some(e.as_str());
        *last = Some(e);
        drop(last);
        if changed {
            self.publish();
        }
    }
}

/// Whether a process listens on the NRI socket (a host path, under the
/// root): containerd creates it only with NRI enabled and external plugins
/// allowed. Read from /proc/net/unix, not by connecting: containerd logs every
/// connection that does not register as a failed plugin.
pub fn probe(host: &super::read::ReadHost, socket: &std::path::Path) -> Result<(), String> {
    let real = host.path(socket);
    if !real.exists() {
        return Err(format!(
            "no NRI socket at {}: NRI is disabled in the running containerd, or it listens elsewhere",
            socket.display()
        ));
    }
    // A socket someone besides root could have made is not containerd's.
    super::peer::socket_file(&real)?;
    match host.read_string(std::path::Path::new("/proc/net/unix")) {
        Ok(Some(table)) if listening(&table, &real.to_string_lossy()) => Ok(()),
        Ok(Some(_)) => Err(format!(
            "{} exists but nothing listens on it (left by a containerd that stopped?)",
            socket.display()
        )),
        // Without the socket table: whether it accepts a connection.
        _ => std::os::unix::net::UnixStream::connect(&real)
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "the NRI socket {} does not accept connections ({e})",
                    socket.display()
                )
            }),
    }
}

/// A listening socket bound to `path` in /proc/net/unix's table (flags
/// __SO_ACCEPTCON, 0x10000).
pub fn listening(table: &str, path: &str) -> bool {
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8
            && f[7] == path
            && u32::from_str_radix(f[3], 16).is_ok_and(|flags| flags & 0x10000 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_listening_socket_counts() {
        // From /proc/net/unix with containerd 2.1 running (its NRI socket listening).
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000092a66494: 00000002 00000000 00010000 0001 01 3527059 /run/nri/nri.sock\n\
            00000000dfb71810: 00000003 00000000 00000000 0001 03 3530156 /run/nri/nri.sock\n";
        assert!(listening(table, "/run/nri/nri.sock"));
        assert!(!listening(table, "/run/containerd/containerd.sock"));
        let connected_only = table.replace("00010000", "00000000");
        assert!(!listening(&connected_only, "/run/nri/nri.sock"));
    }

    #[test]
    fn a_pod_without_a_handler_uses_the_default_ones_base_spec() {
        let s = State::default();
        s.set_base_specs([
            ("runc".to_owned(), true, Some((1, 2))),
            ("nvidia".to_owned(), false, None),
        ]);
        assert_eq!(s.base_spec_memlock(""), BaseSpec::Set((1, 2)));
        assert_eq!(s.base_spec_memlock("runc"), BaseSpec::Set((1, 2)));
        assert_eq!(s.base_spec_memlock("nvidia"), BaseSpec::Unset);
        assert!(matches!(
            s.base_spec_memlock("kata"),
            BaseSpec::Unknown(why) if why.contains("\"kata\" was not among")
        ));
    }

    /// Before the first reconcile nothing is known; a reconcile without
    /// containerd's view keeps the last good table rather than empty it.
    #[test]
    fn the_last_good_table_is_kept() {
        let s = State::default();
        assert!(matches!(
            s.base_spec_memlock(""),
            BaseSpec::Unknown(why) if why.contains("no reconcile")
        ));
        s.set_base_specs([("runc".to_owned(), true, Some((1, 2)))]);
        s.set_base_specs(std::iter::empty());
        assert_eq!(s.base_spec_memlock("runc"), BaseSpec::Set((1, 2)));
        assert_eq!(s.base_spec_memlock(""), BaseSpec::Set((1, 2)));
    }

    /// `auto` and the check ask `probe`: a socket anyone could have bound is
    /// no containerd's, whatever listens there.
    #[test]
    fn probe_refuses_a_socket_someone_besides_root_could_have_made() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("run/nri")).unwrap();
        let real = t.path().join("run/nri/nri.sock");
        let _l = std::os::unix::net::UnixListener::bind(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o666)).unwrap();
        let host = Host::new(t.path()).reader();
        let e = probe(&host, Path::new("/run/nri/nri.sock")).unwrap_err();
        assert!(e.contains("writable by others"), "{e}");
    }

    #[test]
    fn event_bits_follow_nri() {
        // CREATE_CONTAINER = 4 → 0x8, as nri's EventMask.Set.
        assert_eq!(event_bit(api::Event::CreateContainer), 0x8);
        assert_eq!(event_bit(api::Event::RunPodSandbox), 0x1);
    }

    #[test]
    fn a_registration_clears_the_last_error_and_counts() {
        let s = State::default();
        s.set_error("gone".into());
        assert_eq!(s.status().last_error.as_deref(), Some("gone"));
        s.set_registered(true);
        s.set_registered(true);
        let st = s.status();
        assert!(st.registered);
        assert_eq!(st.registrations, 1);
        assert_eq!(st.last_error, None);
        s.set_error("containerd stopped".into());
        assert!(!s.status().registered);
    }
}
