//! The NRI plugin as a task of the daemon (`[containerd] memlock_via` other
//! than "base-spec"): registers with containerd's NRI socket, answers
//! CreateContainer with the pure decision of `concerns::containerd::nri`, and
//! registers again, with backoff, whenever the connection ends (a containerd
//! restart). Its state is shared with the reconcile through [`State`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::concerns::containerd::nri::{self as decide, Target, Verdict};
use crate::concerns::registry::SECTIONS;
use crate::config::Config;
use crate::host::Host;
use crate::host::nri::plugin::{self, Identity};
use crate::host::nri::{BaseSpec, Handler, State, api};

pub const PLUGIN_NAME: &str = "rdma-node-agent";
/// How often a connected plugin looks whether its settings changed.
const RELOAD: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// After this long without a reconcile that read the handlers' base specs,
/// the check says why the plugin has not registered (it registers only then).
const FIRST_TABLE: Duration = Duration::from_secs(20);

/// The settings one session runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    socket: PathBuf,
    index: String,
    target: Target,
}

/// The config as `Config::load` reads it, without its warnings: the
/// reconcile logs those; this task reads the file every few seconds.
fn load_quietly(host: &Host, path: &std::path::Path) -> Option<Config> {
    match host.read_trusted(path, "the agent config") {
        Ok(None) => Some(Config::default()),
        Ok(Some(d)) => String::from_utf8(d.bytes)
            .ok()
            .and_then(|t| Config::parse(&t, &host.path(path), SECTIONS).ok()),
        Err(_) => None,
    }
}

fn settings(host: &Host, cfg: &Config) -> Option<Settings> {
    let c = &cfg.containerd;
    (c.enabled && c.memlock_via.may_use_nri()).then(|| Settings {
        socket: host.path(&c.nri_socket),
        index: c.nri_index.clone(),
        target: Target {
            memlock: c.memlock,
            annotations: c.nri_annotations.clone(),
            annotation_namespaces: c.nri_annotation_namespaces.clone(),
        },
    })
}

struct Adjuster {
    target: Target,
    state: Arc<State>,
}

impl Handler for Adjuster {
    fn synchronize(&self, pods: &[api::PodSandbox], containers: &[api::Container]) {
        // Running containers keep their rlimits: reported, never updated.
        let rdma = containers
            .iter()
            .filter(|c| {
                let pod = pods.iter().find(|p| p.id == c.pod_sandbox_id);
                let unset = BaseSpec::Unset;
                !matches!(
                    decide::adjust(pod, c, &unset, &self.target),
                    Verdict::NotRdma
                )
            })
            .count();
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            rdma_containers = rdma,
            "NRI synchronize: running containers keep their limits; new RDMA containers get memlock {}",
            self.target.memlock
        );
    }

    fn create_container(&self, req: &api::CreateContainerRequest) -> api::CreateContainerResponse {
        let Some(c) = &req.container else {
            return api::CreateContainerResponse::default();
        };
        let handler = req.pod.as_ref().map_or("", |p| p.runtime_handler.as_str());
        let base_spec = self.state.base_spec_memlock(handler);
        let v = decide::adjust(req.pod.as_ref(), c, &base_spec, &self.target);
        let pod = req
            .pod
            .as_ref()
            .map(|p| format!("{}/{}", p.namespace, p.name));
        match &v {
            Verdict::Adjust { reason } => {
                self.state.count_adjusted();
                tracing::info!(container = %c.name, id = %c.id, pod = ?pod, "NRI: RLIMIT_MEMLOCK set to {} ({reason})", self.target.memlock);
            }
            Verdict::KeptLower { soft, hard, reason } => {
                self.state.count_kept_lower();
                tracing::warn!(container = %c.name, id = %c.id, pod = ?pod, "NRI: RDMA container ({reason}) has an explicit RLIMIT_MEMLOCK soft {soft} hard {hard}, below the target {}: kept, not raised; remove the lower limit (a base spec or another NRI plugin sets it) for RDMA to register memory", self.target.memlock);
            }
            Verdict::BaseSpecUnknown { reason, why } => {
                self.state.count_base_spec_unknown();
                tracing::warn!(container = %c.name, id = %c.id, pod = ?pod, "NRI: RDMA container ({reason}) not raised to {}: its runtime handler's base spec, which may set a lower RLIMIT_MEMLOCK the operator wants kept, is not known ({why})", self.target.memlock);
            }
            Verdict::AlreadyEnough { .. } | Verdict::NotRdma => {}
        }
        decide::response(&v, &self.target)
    }
}

/// Runs [`run`] until `stop` fires, starting it again should it panic: a
/// dead plugin task would leave RDMA containers without memlock unreported.
pub async fn supervise(
    host: Host,
    config_path: PathBuf,
    state: Arc<State>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    state.publish_to(host.clone());
    loop {
        let task = tokio::spawn(run(
            host.clone(),
            config_path.clone(),
            state.clone(),
            stop.clone(),
        ));
        match task.await {
            Ok(()) => return,
            Err(e) => {
                let msg = format!("the NRI plugin task failed ({e}); starting it again");
                tracing::error!("{msg}");
                state.set_error(msg);
                tokio::time::sleep(BACKOFF_MAX).await;
            }
        }
    }
}

/// Runs until `stop` fires: one session after another while the config asks
/// for NRI, with backoff between failed ones.
pub async fn run(
    host: Host,
    config_path: PathBuf,
    state: Arc<State>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if !first_table(&state, &mut stop).await {
        return;
    }
    let mut backoff = BACKOFF_MIN;
    let mut last_logged: Option<String> = None;
    let mut last_good: Option<Settings> = None;
    loop {
        let wanted = match load_quietly(&host, &config_path) {
            Some(c) => {
                last_good = settings(&host, &c);
                last_good.clone()
            }
            None => last_good.clone(),
        };
        let Some(s) = wanted else {
            state.set_registered(false);
            tokio::select! {
                _ = tokio::time::sleep(RELOAD) => continue,
                _ = stop.changed() => return,
            }
        };
        let before = state.status().registrations;
        match session(&host, &config_path, &state, &stop, s).await {
            None => {
                tracing::info!("NRI settings changed: registering again");
                state.set_registered(false);
                continue;
            }
            Some(Ok(())) => return,
            Some(Err(e)) => {
                let msg = e.to_string();
                state.set_error(msg.clone());
                // Said once per kind of failure, not every retry.
                if last_logged.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("NRI plugin: {msg}; retrying with backoff");
                    last_logged = Some(msg);
                }
                // It had registered: containerd restarted; come back quickly.
                if state.status().registrations > before {
                    backoff = BACKOFF_MIN;
                    last_logged = None;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Waits for the first reconcile's table of base specs; `false` when told to
/// stop first. Registered before the base specs are known, new RDMA
/// containers would be left unraised (never over an unknown lower limit), and
/// `containerd.nri` would say "registered" of a plugin that raises nothing:
/// past FIRST_TABLE the check says why.
async fn first_table(state: &State, stop: &mut tokio::sync::watch::Receiver<bool>) -> bool {
    let start = tokio::time::Instant::now();
    while !state.base_specs_known() {
        if start.elapsed() >= FIRST_TABLE {
            state.set_error(format!(
                "not registered yet: no reconcile has read containerd's runtime handlers and their base specs in {} s (see containerd.memlock), and until one has no RDMA container could be raised",
                FIRST_TABLE.as_secs()
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => return false,
        }
    }
    true
}

/// One registration with these settings, until it ends or `stop` fires; `None`
/// when the config's settings changed (the next session registers with them).
async fn session(
    host: &Host,
    config_path: &std::path::Path,
    state: &Arc<State>,
    stop: &tokio::sync::watch::Receiver<bool>,
    s: Settings,
) -> Option<Result<(), plugin::SessionError>> {
    let id = Identity {
        socket: s.socket.clone(),
        name: PLUGIN_NAME.into(),
        index: s.index.clone(),
        registration_timeout: Duration::from_secs(5),
    };
    let handler = Arc::new(Adjuster {
        target: s.target.clone(),
        state: state.clone(),
    });
    let (changed_tx, mut changed_rx) = tokio::sync::watch::channel(false);
    let watcher = {
        let (host, path) = (host.clone(), config_path.to_path_buf());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD).await;
                // A config that does not load keeps the plugin as it is,
                // as the reconcile keeps the last good config.
                let Some(cfg) = load_quietly(&host, &path) else {
                    continue;
                };
                if settings(&host, &cfg).as_ref() != Some(&s) {
                    let _ = changed_tx.send(true);
                    return;
                }
            }
        })
    };
    let mut session_stop = stop.clone();
    let outcome = tokio::select! {
        r = plugin::session(&id, handler, state, &mut session_stop) => Some(r),
        _ = changed_rx.changed() => None,
    };
    watcher.abort();
    outcome
}
