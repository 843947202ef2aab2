//! The return-to-service gate's selftest, run by the daemon (`[peers] gate`):
//! while the gate of this boot is closed and no selftest passed since the
//! event that closed it, a thread beside the prober asks systemd to run
//! `rdma-node-agent selftest` as a transient unit with its own sandbox (the
//! daemon's unit forbids what the selftest needs: prlimit beyond its own
//! limits, perftest's devices and network). Once per closing event, again
//! hourly while it does not pass. The selftest keeps its verdict as agent
//! state; the next reconcile's `rdma.gate` reads it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::Connection;
use crate::concerns::rdma::peers::gate::{self, GateState, Tried};
use crate::concerns::rdma::peers::selftest_record::{self, SelftestRecord};
use crate::host::Host;
use crate::host::service::{PrivilegedHelper, ServiceManager};
use crate::host::stop::Stop;

/// perftest's own timeout is 60 s a port; a node has a handful.
const TIMEOUT: Duration = Duration::from_secs(600);
/// The transient units' names start with this (one per run).
pub const UNIT_PREFIX: &str = "rdma-node-agent-selftest";

/// What the daemon tried for the gate, kept across rounds.
#[derive(Debug, Default)]
pub struct GateSelftest {
    tried: Option<Tried>,
}

impl GateSelftest {
    /// Runs the selftest when the gate owes one (on the live host only; under
    /// `--root` the tree has no systemd to ask).
    pub fn maybe_run(
        &mut self,
        host: &Host,
        live: &Mutex<Option<Connection>>,
        config_path: &Path,
        stop: &Stop,
    ) {
        if !host.is_live() {
            return;
        }
        let manager = live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|c| c.live.manager.clone());
        let boot = host
            .read_string(Path::new("/proc/sys/kernel/random/boot_id"))
            .ok()
            .flatten()
            .map(|b| b.trim().to_owned())
            .unwrap_or_default();
        self.maybe_run_with(host, &boot, manager, config_path, stop, own_exe());
    }

    /// `maybe_run` with the boot id, the service manager and the agent's
    /// program given; the transient unit's name when one was started.
    pub fn maybe_run_with(
        &mut self,
        host: &Host,
        boot: &str,
        manager: Option<Arc<dyn ServiceManager>>,
        config_path: &Path,
        stop: &Stop,
        exe: PathBuf,
    ) -> Option<String> {
        let now = unix_now();
        let state: Option<GateState> = read_json(host, gate::FILE);
        let passed = read_json::<SelftestRecord>(host, selftest_record::FILE)
            .and_then(|r| r.passed_on(Some(boot)));
        if boot.is_empty() || !gate::selftest_owed(state.as_ref(), boot, passed, self.tried, now) {
            return None;
        }
        // One per host, by name: a daemon restarted while its selftest ran
        // (systemd leaves a running job be) waits for that one's verdict
        // rather than racing it for the same ports.
        let unit = format!("{UNIT_PREFIX}.service");
        if let Some(m) = &manager
            && m.status(&unit).is_ok_and(|s| s.active_state.is_up())
        {
            tracing::info!(
                "return-to-service gate: the selftest ({unit}) still runs; its verdict is waited for"
            );
            return None;
        }
        let since = state.map_or(0, |s| s.closed_since_unix);
        self.tried = Some(Tried {
            closed_since_unix: since,
            at_unix: now,
        });
        let Some(manager) = manager else {
            tracing::warn!(
                "return-to-service gate: cannot run the selftest: systemd's bus does not answer; run `rdma-node-agent selftest` by hand"
            );
            return None;
        };
        let argv = vec![
            exe.display().to_string(),
            "--config".into(),
            config_path.display().to_string(),
            "selftest".into(),
        ];
        tracing::info!("return-to-service gate: running the selftest ({unit})");
        match manager.run_privileged_helper(PrivilegedHelper::Selftest, &unit, &argv, TIMEOUT, stop)
        {
            Ok(()) => tracing::info!("return-to-service gate: the selftest passed ({unit})"),
            Err(e) => tracing::warn!(
                "return-to-service gate: the selftest did not pass ({unit}: {e}); `journalctl -u {unit}` has its output; tried again in {} min or at the next `rdma-node-agent gate reset`",
                gate::SELFTEST_RETRY_SECS / 60
            ),
        }
        Some(unit)
    }
}

fn read_json<T: serde::de::DeserializeOwned>(host: &Host, path: &str) -> Option<T> {
    let bytes = host.state_read(Path::new(path)).ok()??;
    serde_json::from_slice(&bytes).ok()
}

fn own_exe() -> PathBuf {
    let p = std::env::current_exe().unwrap_or_else(|_| "/usr/bin/rdma-node-agent".into());
    let s = p.to_string_lossy();
    // After a package upgrade the running file is gone; the new one is at the same path.
    PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concerns::rdma::peers::gate::Identity;
    use crate::engine::fakes::FakeManager;

    fn write(root: &Path, path: &str, bytes: &[u8]) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    fn closed(boot: &str, since: u64) -> Vec<u8> {
        serde_json::to_vec(&GateState {
            identity: Identity {
                boot_id: boot.into(),
                kernel: "6.1".into(),
                driver: "rdma_rxe".into(),
            },
            opened_unix: None,
            closed_since_unix: since,
            closed_why: "a boot".into(),
        })
        .unwrap()
    }

    #[test]
    fn a_closed_gate_gets_one_selftest_run_per_event_in_its_own_sandbox() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        write(t.path(), gate::FILE, &closed("b1", 1_000));
        let fake = Arc::new(FakeManager::new(&[], &Stop::new()));
        // The unit's state at each owed run: the first finds one still
        // running (a previous daemon's), then none.
        fake.states
            .lock()
            .unwrap()
            .extend(["active", "inactive", "inactive"]);
        let manager: Arc<dyn ServiceManager> = fake.clone();
        let mut g = GateSelftest::default();
        let run = |g: &mut GateSelftest| {
            g.maybe_run_with(
                &host,
                "b1",
                Some(manager.clone()),
                Path::new("/etc/rdma-node-agent/config.toml"),
                &Stop::new(),
                "/usr/bin/rdma-node-agent".into(),
            )
        };
        // Owed, but a selftest still runs: waited for, not raced.
        assert_eq!(run(&mut g), None);
        assert!(fake.calls().iter().all(|c| !c.starts_with("helper")));
        let unit = run(&mut g).expect("owed after a boot");
        assert_eq!(unit, format!("{UNIT_PREFIX}.service"));
        let calls = fake.calls.lock().unwrap().clone();
        assert_eq!(
            calls.last().unwrap(),
            &format!(
                "helper {:?} {unit}: /usr/bin/rdma-node-agent --config /etc/rdma-node-agent/config.toml selftest",
                PrivilegedHelper::Selftest
            ),
            "{calls:?}"
        );
        // Not again for the same event (the fake's run passed, but no verdict
        // was recorded: the retry waits its hour).
        assert_eq!(run(&mut g), None);
        // A pass recorded on this boot after the event: nothing owed.
        let pass = SelftestRecord {
            boot_id: "b1".into(),
            finished_unix: 2_000,
            passed: true,
            summary: "ok".into(),
        };
        write(t.path(), selftest_record::FILE, &pass.record().bytes);
        write(t.path(), gate::FILE, &closed("b1", 1_500));
        assert_eq!(run(&mut GateSelftest::default()), None);
        // A reset after the pass: a new event, a new run.
        write(t.path(), gate::FILE, &closed("b1", 2_500));
        assert!(run(&mut g).is_some());
    }
}
