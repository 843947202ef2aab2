//! The systemd service manager over D-Bus (org.freedesktop.systemd1), with zbus.

use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt;
use zbus::proxy::CacheProperties;
use zbus::{Connection, OwnedObjectPath, Variant, proxy};

use super::service::{
    PrivilegedHelper, ServiceManager, SystemdError, UnitReader, UnitState, UnitStatus,
};
use super::stop::{self, Stop};

#[proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    fn subscribe(&self) -> zbus::Result<()>;
    fn reload(&self) -> zbus::Result<()>;
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Variant<'_>)],
        aux: &[(&str, &[(&str, Variant<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Job",
    default_service = "org.freedesktop.systemd1"
)]
trait Job {
    fn cancel(&self) -> zbus::Result<()>;
    /// `waiting` or `running`.
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    /// `restart`, then `start` once its stop half has run.
    #[zbus(property)]
    fn job_type(&self) -> zbus::Result<String>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
trait Unit {
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
    /// The unit's queued or running job: (id, path), path `/` when none.
    #[zbus(property)]
    fn job(&self) -> zbus::Result<(u32, OwnedObjectPath)>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
trait Service {
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> zbus::Result<u32>;
    #[zbus(property, name = "LimitMEMLOCK")]
    fn limit_memlock(&self) -> zbus::Result<u64>;
    #[zbus(property, name = "ExecMainStartTimestamp")]
    fn exec_main_start_timestamp(&self) -> zbus::Result<u64>;
}

/// A connection to the system bus, used from the synchronous core (the CLI,
/// the daemon's reconcile thread) through the process's one runtime.
pub struct Dbus {
    rt: &'static tokio::runtime::Runtime,
    /// Replaced when the bus restarts (dbus.service restarted under us).
    conn: std::sync::Mutex<Connection>,
}

fn call(name: &str) -> impl Fn(zbus::Error) -> SystemdError + '_ {
    move |e| SystemdError::Call {
        call: name.to_owned(),
        message: e.to_string(),
    }
}

impl Dbus {
    fn conn(&self) -> Connection {
        self.conn.lock().expect("bus connection").clone()
    }

    /// A new connection to the system bus, for every call from now on.
    async fn reconnect(&self) -> Result<(), SystemdError> {
        let conn = Connection::system()
            .await
            .map_err(|e| SystemdError::Connect(e.to_string()))?;
        *self.conn.lock().expect("bus connection") = conn;
        Ok(())
    }

    /// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS` or the default socket).
    pub fn system() -> Result<Dbus, SystemdError> {
        let rt = super::rt::shared().map_err(|e| SystemdError::Connect(e.to_string()))?;
        let conn = rt
            .block_on(Connection::system())
            .map_err(|e| SystemdError::Connect(e.to_string()))?;
        Ok(Dbus {
            rt,
            conn: std::sync::Mutex::new(conn),
        })
    }

    /// The manager, with job signals subscribed to and listened for: listening
    /// before a job is queued means its end cannot slip by unseen.
    async fn watching_jobs(&self) -> Result<(ManagerProxy<'_>, JobRemovedStream), SystemdError> {
        let m = ManagerProxy::new(&self.conn())
            .await
            .map_err(call("Manager"))?;
        // Job signals are only sent to subscribed clients; once per connection.
        match m.subscribe().await {
            Ok(()) => {}
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.freedesktop.systemd1.AlreadySubscribed" => {}
            Err(e) => return Err(call("Subscribe")(e)),
        }
        let removed = m.receive_job_removed().await.map_err(call("JobRemoved"))?;
        Ok((m, removed))
    }

    async fn unit_path(&self, unit: &str) -> Result<OwnedObjectPath, SystemdError> {
        let m = ManagerProxy::new(&self.conn())
            .await
            .map_err(call("Manager"))?;
        // LoadUnit, not GetUnit: a unit that is not loaded yet is not an error.
        m.load_unit(unit).await.map_err(call("LoadUnit"))
    }
}

impl UnitReader for Dbus {
    fn status(&self, unit: &str) -> Result<UnitStatus, SystemdError> {
        self.rt.block_on(async {
            let path = self.unit_path(unit).await?;
            let u = UnitProxy::builder(&self.conn())
                .path(path.clone())
                .cache_properties(CacheProperties::No)
                .build()
                .await
                .map_err(call("Unit"))?;
            let active_state = u.active_state().await.map_err(call("ActiveState"))?;
            let s = ServiceProxy::builder(&self.conn())
                .path(path)
                .cache_properties(CacheProperties::No)
                .build()
                .await
                .map_err(call("Service"))?;
            // A unit that is not a service has none of these: not an error. A
            // service's MainPID that cannot be read is one (0 would read as "none").
            let main_pid = match s.main_pid().await {
                Ok(pid) => pid,
                Err(_) if !unit.ends_with(".service") => 0,
                Err(e) => return Err(call("MainPID")(e)),
            };
            let limit_memlock = s.limit_memlock().await.ok();
            let started = s
                .exec_main_start_timestamp()
                .await
                .ok()
                .filter(|us| *us > 0)
                .map(|us| UNIX_EPOCH + Duration::from_micros(us));
            Ok(UnitStatus {
                active_state: UnitState::parse(&active_state),
                main_pid,
                limit_memlock,
                started,
            })
        })
    }
}

impl ServiceManager for Dbus {
    fn reload(&self) -> Result<(), SystemdError> {
        self.rt.block_on(async {
            let m = ManagerProxy::new(&self.conn())
                .await
                .map_err(call("Manager"))?;
            m.reload().await.map_err(call("Reload"))
        })
    }

    fn restart(&self, unit: &str, timeout: Duration, stop: &Stop) -> Result<(), SystemdError> {
        self.rt.block_on(async {
            let (m, removed) = self.watching_jobs().await?;
            // A restart or start still waiting in systemd's queue (one an earlier
            // instance of the agent left behind when it was stopped) starts the
            // unit on the files as they are now: wait for it rather than queue
            // another, so one change costs containerd one restart.
            if let Some((job, kind)) = self.waiting_start(unit).await {
                tracing::info!(
                    unit,
                    "a {kind} job of {unit} is already queued: waiting for it"
                );
                return self
                    .wait_for_job(removed, job, unit, kind, timeout, stop)
                    .await;
            }
            let job = m
                .restart_unit(unit, "replace")
                .await
                .map_err(call("RestartUnit"))?;
            self.wait_for_job(removed, job, unit, "restart", timeout, stop)
                .await
        })
    }

    fn queue_restart(&self, unit: &str) -> Result<(), SystemdError> {
        self.rt.block_on(async {
            let m = ManagerProxy::new(&self.conn())
                .await
                .map_err(call("Manager"))?;
            m.restart_unit(unit, "replace")
                .await
                .map(|_| ())
                .map_err(call("RestartUnit"))
        })
    }

    fn run_transient(
        &self,
        unit: &str,
        argv: &[String],
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), SystemdError> {
        self.transient(unit, argv, timeout, stop, Vec::new())
    }

    fn run_privileged_helper(
        &self,
        helper: PrivilegedHelper,
        unit: &str,
        argv: &[String],
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), SystemdError> {
        // Each its one capability, its answer's directory, no network.
        let mut sandbox = vec![
            ("NoNewPrivileges", Variant::from(true)),
            ("ProtectSystem", Variant::from("strict")),
            ("ProtectHome", Variant::from("yes")),
            ("PrivateTmp", Variant::from(true)),
            ("PrivateNetwork", Variant::from(true)),
            ("ProtectKernelModules", Variant::from(true)),
            ("ProtectControlGroups", Variant::from(true)),
            ("LockPersonality", Variant::from(true)),
            ("MemoryDenyWriteExecute", Variant::from(true)),
            ("RestrictRealtime", Variant::from(true)),
            ("UMask", Variant::from(0o077u32)),
        ];
        if helper == PrivilegedHelper::Selftest {
            // perftest's loopback meets over TCP on 127.0.0.1 and sends over
            // the RDMA device's netdev: the host's network, not a private one.
            sandbox.retain(|(k, _)| *k != "PrivateNetwork");
        }
        sandbox.extend(match helper {
            // CAP_SYS_ADMIN: the kernel's rule for reading config space past
            // 64 bytes and for writing; /sys is writable under ProtectSystem=strict.
            PrivilegedHelper::PciConfig => vec![
                ("CapabilityBoundingSet", Variant::from(1u64 << 21)),
                (
                    "ReadWritePaths",
                    Variant::from(vec![super::pci_helper::OUT_DIR]),
                ),
                ("PrivateDevices", Variant::from(true)),
            ],
            // CAP_SYSLOG (kernel.dmesg_restrict), /dev/kmsg readable and no other
            // device, and no syslog(2), which could clear the buffer.
            PrivilegedHelper::KernelLog => vec![
                ("CapabilityBoundingSet", Variant::from(1u64 << 34)),
                (
                    "ReadWritePaths",
                    Variant::from(vec![super::kmsg_helper::OUT_DIR]),
                ),
                ("DevicePolicy", Variant::from("closed")),
                ("DeviceAllow", Variant::from(vec![("/dev/kmsg", "r")])),
                ("ProtectKernelTunables", Variant::from(true)),
                // A deny list (`false`: not an allow list).
                ("SystemCallFilter", Variant::from((false, vec!["syslog"]))),
            ],
            // CAP_SYS_RESOURCE only: prlimit raises perftest's limits to the
            // pods'; without CAP_IPC_LOCK the memlock limit is what is tested,
            // as in a non-root pod. /dev/infiniband is the host's.
            PrivilegedHelper::Selftest => vec![
                ("CapabilityBoundingSet", Variant::from(1u64 << 24)),
                (
                    "ReadWritePaths",
                    Variant::from(vec![crate::host::state::STATE_DIR]),
                ),
            ],
        });
        self.transient(unit, argv, timeout, stop, sandbox)
    }
}

impl Dbus {
    /// Runs `argv` as the oneshot transient unit `unit`, with `sandbox`'s
    /// properties besides, and waits for it.
    fn transient(
        &self,
        unit: &str,
        argv: &[String],
        timeout: Duration,
        stop: &Stop,
        sandbox: Vec<(&str, Variant<'_>)>,
    ) -> Result<(), SystemdError> {
        let Some(program) = argv.first() else {
            return Err(SystemdError::Call {
                call: "StartTransientUnit".into(),
                message: "no command to run".into(),
            });
        };
        let exec_start = vec![(program.clone(), argv.to_vec(), false)];
        let mut properties = vec![
            (
                "Description",
                Variant::from(format!("rdma-node-agent: {}", argv.join(" "))),
            ),
            ("Type", Variant::from("oneshot")),
            ("ExecStart", Variant::from(exec_start)),
            // Gone once it ends, failed or not, so the next run can reuse the name.
            ("CollectMode", Variant::from("inactive-or-failed")),
            (
                "TimeoutStartUSec",
                Variant::from(timeout.as_micros() as u64),
            ),
        ];
        properties.extend(sandbox);
        self.rt.block_on(async {
            let (m, removed) = self.watching_jobs().await?;
            let job = m
                .start_transient_unit(unit, "fail", &properties, &[])
                .await
                .map_err(call("StartTransientUnit"))?;
            self.wait_for_job(removed, job, unit, "start", timeout, stop)
                .await
        })
    }
}

impl Dbus {
    /// Waits for `job` to be removed; its result must be `done`. When the agent
    /// is asked to stop meanwhile, a job still queued is cancelled (it may be
    /// waiting for the agent's own stop job: waiting on would deadlock until
    /// systemd kills the agent) and one already running is left to systemd.
    async fn wait_for_job(
        &self,
        mut removed: JobRemovedStream,
        job: OwnedObjectPath,
        unit: &str,
        kind: &'static str,
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), SystemdError> {
        let started = std::time::Instant::now();
        let wait = async {
            while let Some(signal) = removed.next().await {
                if let Ok(args) = signal.args() {
                    if args.job == job {
                        return Some(args.result.clone());
                    }
                }
            }
            None
        };
        let stopping = async {
            while !stop.requested() {
                tokio::time::sleep(stop::POLL).await;
            }
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout(timeout, wait) => r,
            () = stopping => {
                let cancelled = self.cancel_if_waiting(&job, kind).await;
                return Err(SystemdError::Stopped { unit: unit.to_owned(), job: kind, cancelled });
            }
        };
        let outcome = match outcome {
            // The bus went away (dbus.service restarted): the job goes on without
            // us; follow it from a new connection instead of calling it failed.
            Ok(None) => {
                tracing::warn!(
                    unit,
                    "the system bus closed while waiting for {unit}'s {kind} job: reconnecting to follow it"
                );
                let left = timeout.saturating_sub(started.elapsed());
                match tokio::time::timeout(left, self.follow_without_signals(&job, unit)).await {
                    Ok(r) => Ok(r),
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        match outcome {
            Ok(Some(result)) if result == "done" => Ok(()),
            Ok(Some(result)) => Err(SystemdError::JobFailed {
                unit: unit.to_owned(),
                job: kind,
                result,
            }),
            Ok(None) | Err(_) => Err(SystemdError::JobTimeout {
                unit: unit.to_owned(),
                job: kind,
                timeout,
            }),
        }
    }

    /// After the bus restarted: until `job` is gone from the unit, then the
    /// result as systemd would have signalled it (`done` when the unit is active).
    async fn follow_without_signals(&self, job: &OwnedObjectPath, unit: &str) -> Option<String> {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if self.reconnect().await.is_err() {
                continue;
            }
            let Ok(path) = self.unit_path(unit).await else {
                continue;
            };
            let Ok(u) = UnitProxy::builder(&self.conn())
                .path(path)
                .cache_properties(CacheProperties::No)
                .build()
                .await
            else {
                continue;
            };
            match u.job().await {
                Ok((_, current)) if current == *job => continue,
                Ok(_) => {}
                Err(_) => continue,
            }
            return match UnitState::parse(&u.active_state().await.ok()?) {
                UnitState::Active => Some("done".into()),
                UnitState::Activating | UnitState::Reloading => continue,
                other => Some(format!("failed ({unit} is {other})")),
            };
        }
    }

    /// The unit's job when it is a start or restart still waiting (none of its
    /// start has run, so the unit will read the files as they are when it does).
    async fn waiting_start(&self, unit: &str) -> Option<(OwnedObjectPath, &'static str)> {
        let path = self.unit_path(unit).await.ok()?;
        let u = UnitProxy::builder(&self.conn())
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .ok()?;
        let (_, job) = u.job().await.ok()?;
        // A start of a unit that runs is a no-op: it would read nothing new.
        let running = UnitState::parse(&u.active_state().await.ok()?) == UnitState::Active;
        if job.as_str() == "/" {
            return None;
        }
        let j = JobProxy::builder(&self.conn())
            .path(job.clone())
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .ok()?;
        let (state, kind) = (j.state().await.ok()?, j.job_type().await.ok()?);
        let kind = match kind.as_str() {
            "restart" => "restart",
            "start" if !running => "start",
            _ => return None,
        };
        (state == "waiting").then_some((job, kind))
    }

    /// Cancels `job` if none of it has run. True when it was cancelled.
    ///
    /// A restart job is a stop, then a start: once the stop has run, systemd
    /// turns it into a start job and sets it waiting again (here, behind the
    /// agent's own stop, which is ordered before any start). Cancelling it then
    /// would leave the unit stopped, so only a job still of its first kind is
    /// cancelled; the rest is left to systemd, which starts the unit once the
    /// agent is gone.
    async fn cancel_if_waiting(&self, job: &OwnedObjectPath, kind: &str) -> bool {
        let Ok(j) = JobProxy::builder(&self.conn())
            .path(job.clone())
            .cache_properties(CacheProperties::No)
            .build()
            .await
        else {
            // Already gone: it finished.
            return false;
        };
        match (j.state().await, j.job_type().await) {
            (Ok(state), Ok(job_type)) if state == "waiting" && job_type == kind => {
                j.cancel().await.is_ok()
            }
            _ => false,
        }
    }
}
