//! The live host's capabilities, for the executor and the effects it runs:
//! systemd, a fresh RDMA netlink socket, and host commands.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::engine::effect::{CommandError, LiveHost};
use crate::engine::executor::Live;
use crate::host::Host;
use crate::host::dbus::Dbus;
use crate::host::files::ChownError;
use crate::host::live_files::LiveFiles;
use crate::host::netlink::{self, NetlinkError, RdmaNetlink};
use crate::host::service::ServiceManager;

struct System {
    host: Host,
}

/// The unit has no CAP_CHOWN: a rewritten file that is not root:root gets its
/// owner back from a one-shot transient unit, as the initramfs rebuild does.
pub struct SystemdChown {
    pub manager: Arc<dyn ServiceManager>,
    pub chown: PathBuf,
}

pub const CHOWN_UNIT: &str = "rdma-node-agent-chown.service";

impl crate::host::files::Chown for SystemdChown {
    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<(), ChownError> {
        let argv = vec![
            self.chown.display().to_string(),
            "-h".to_owned(),
            format!("{uid}:{gid}"),
            path.display().to_string(),
        ];
        self.manager
            .run_transient(
                CHOWN_UNIT,
                &argv,
                std::time::Duration::from_secs(30),
                &crate::host::stop::Stop::new(),
            )
            .map_err(|source| ChownError {
                unit: CHOWN_UNIT.to_owned(),
                source,
            })
    }
}

/// Said once per process: a daemon would repeat it every cycle.
static NO_SYSTEMD_SAID: AtomicBool = AtomicBool::new(false);

/// The live host's capabilities, made once and kept: the daemon's cycles share
/// one bus connection (it reconnects itself when dbus restarts).
#[derive(Clone)]
pub struct Connection {
    pub live: Arc<Live>,
    /// Why systemd could not be asked, for the checks to say what they could not ask.
    pub error: Option<String>,
}

impl Connection {
    /// Connects to the live host: systemd over D-Bus when its bus answers
    /// (without it restarts are reported as pending and checks rely on files
    /// and /proc).
    pub fn open(host: &Host) -> Connection {
        let (manager, error): (Option<Arc<dyn ServiceManager>>, _) = match Dbus::system() {
            Ok(d) => (Some(Arc::new(d)), None),
            Err(e) => {
                // PID 1 says why: most often not systemd at all (containers, VMs
                // with their own init).
                let pid1 = host
                    .read_string(Path::new("/proc/1/comm"))
                    .ok()
                    .flatten()
                    .map(|c| c.trim().to_owned())
                    .filter(|c| c != "systemd")
                    .map(|c| format!("PID 1 is {c}, not systemd; "))
                    .unwrap_or_default();
                let why = format!("cannot ask systemd: {pid1}{e}");
                if NO_SYSTEMD_SAID.swap(true, Ordering::Relaxed) {
                    tracing::debug!("{why}");
                } else {
                    tracing::warn!(
                        "{why}; unit states are not asked and restarts are left pending"
                    );
                }
                (None, Some(why))
            }
        };
        let live = Live {
            manager,
            host: Box::new(System { host: host.clone() }),
        };
        Connection {
            live: Arc::new(live),
            error,
        }
    }

    /// Whether systemd answered: a connection without it is tried again.
    pub fn has_manager(&self) -> bool {
        self.live.manager.is_some()
    }
}

impl LiveHost for System {
    fn files(&self) -> LiveFiles<'_> {
        LiveFiles::new(&self.host)
    }

    fn rdma_netlink(&self) -> Result<Box<dyn RdmaNetlink>, NetlinkError> {
        netlink::Socket::open().map(|s| Box::new(s) as Box<dyn RdmaNetlink>)
    }

    fn which(&self, program: &str) -> Option<PathBuf> {
        self.host.which(program)
    }

    fn run(&self, argv: &[String]) -> Result<Vec<u8>, CommandError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(CommandError::Empty);
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let program = program.clone();
        match self.host.run(&program, &args) {
            Some(Ok(o)) if o.status.success() => Ok(o.stdout),
            Some(Ok(o)) => Err(CommandError::Failed {
                program,
                code: o.status.code(),
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            }),
            Some(Err(source)) => Err(CommandError::Spawn { program, source }),
            None => Err(CommandError::NotInstalled { program }),
        }
    }
}
