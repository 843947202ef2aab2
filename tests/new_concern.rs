//! The worked example of DEVELOPMENT.md ("Adding a check"), compiled and run:
//! a concern with a live action, written entirely outside the engine (here,
//! outside the crate), planned by the unchanged engine and carried out by the
//! unchanged executor. If adding a live action ever needs an edit to
//! `src/engine/`, this file stops compiling.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdma_node_agent::config::Config;
use rdma_node_agent::engine::check::{Check, Status};
use rdma_node_agent::engine::concern::{Concern, Ctx, Decision, GatherError, Run};
use rdma_node_agent::engine::effect::{
    CommandError, Effect, EffectError, EffectKey, LiveCtx, LiveHost, Ran,
};
use rdma_node_agent::engine::executor::{Executor, Live};
use rdma_node_agent::engine::holds::Holds;
use rdma_node_agent::engine::outcome::ActionStatus;
use rdma_node_agent::engine::plan::{Action, ActionKind};
use rdma_node_agent::engine::{Scope, assess};
use rdma_node_agent::host::Host;
use rdma_node_agent::host::live_files::LiveFiles;
use rdma_node_agent::host::netlink::{NetlinkError, RdmaNetlink};
use rdma_node_agent::host::snapshot::Snapshot;
use rdma_node_agent::host::stop::Stop;

// ---- the concern's folder: src/concerns/kernel/numa.rs, say ----

const CHECK_ID: &str = "kernel.numa_balancing";
const KNOB: &str = "/proc/sys/kernel/numa_balancing";

/// Automatic NUMA balancing migrates pages under registered RDMA memory;
/// GPU/RDMA hosts usually turn it off.
struct NumaBalancing;

impl Concern for NumaBalancing {
    type Facts = Option<String>;

    fn ids(&self) -> &'static [&'static str] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.kernel.enabled
    }

    // Reads only: the snapshot gives a read-only view of the host.
    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Option<String>, GatherError> {
        snap.read_string(Path::new(KNOB))
            .map_err(GatherError::unknown)
    }

    fn decide(&self, knob: &Option<String>, _ctx: &Ctx) -> Decision {
        let (check, actions) = match knob.as_deref().map(str::trim) {
            None => (
                Check::new(CHECK_ID, Status::Unknown, format!("{KNOB} cannot be read")),
                vec![],
            ),
            Some("0") => (Check::new(CHECK_ID, Status::Ok, "off"), vec![]),
            Some(v) => (
                Check::new(CHECK_ID, Status::Warn, format!("on ({v})")),
                vec![Action {
                    kind: ActionKind::Effect(Arc::new(TurnOff)),
                    reason: format!("{KNOB} is {v}"),
                }],
            ),
        };
        Decision {
            checks: vec![check],
            actions,
            ..Decision::default()
        }
    }
}

/// The live action: one `Effect`, in the same folder.
#[derive(Debug)]
struct TurnOff;

impl Effect for TurnOff {
    fn key(&self) -> EffectKey {
        EffectKey::new("sysctl", "kernel.numa_balancing")
    }

    fn describe(&self) -> String {
        "turn automatic NUMA balancing off".into()
    }

    fn run(&self, cx: &LiveCtx) -> Result<Ran, EffectError> {
        let argv = ["sysctl", "-w", "kernel.numa_balancing=0"].map(str::to_owned);
        cx.host.run(&argv).map_err(EffectError::new)?;
        Ok(Ran::done("kernel.numa_balancing = 0"))
    }
}

// ---- the registration line: `&kernel::numa::NumaBalancing,` in concerns::ALL ----

static REGISTERED: &[&dyn Run] = &[&NumaBalancing];

// ---- what the engine and executor do with it, unchanged ----

/// The live host, recording what is run.
#[derive(Default)]
struct Recorder {
    ran: Arc<Mutex<Vec<String>>>,
}

impl LiveHost for Recorder {
    fn files(&self) -> LiveFiles<'_> {
        unreachable!("the example touches no file while acting")
    }
    fn rdma_netlink(&self) -> Result<Box<dyn RdmaNetlink>, NetlinkError> {
        Err(NetlinkError::Unavailable(
            nix::errno::Errno::EPROTONOSUPPORT,
        ))
    }
    fn which(&self, program: &str) -> Option<PathBuf> {
        Some(Path::new("/usr/sbin").join(program))
    }
    fn run(&self, argv: &[String]) -> Result<Vec<u8>, CommandError> {
        self.ran.lock().unwrap().push(argv.join(" "));
        Ok(Vec::new())
    }
}

#[test]
fn a_concern_with_a_live_action_needs_no_engine_change() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(t.path().join(KNOB.trim_start_matches('/')), "1\n").unwrap();
    let host = Host::new(t.path());

    let a = assess(
        &Snapshot::new(host.clone()),
        &Config::default(),
        REGISTERED,
        Scope::All,
        false,
    );
    assert_eq!(a.checks[0].status, Status::Warn);
    let plan = a.plan.unwrap();
    assert_eq!(plan.actions.len(), 1);
    assert_eq!(
        plan.to_json()["actions"][0]["action"],
        "sysctl",
        "the plan names the effect by its key"
    );

    let recorder = Recorder::default();
    let ran = recorder.ran.clone();
    let live = Live {
        manager: None,
        host: Box::new(recorder),
    };
    let stop = Stop::new();
    let out = Executor {
        host: &host,
        live: Some(&live),
        restart_timeout: Duration::from_secs(1),
        stop: &stop,
        legacy_readers: |_, _| Vec::new(),
    }
    .apply(&plan, true, &Holds::default())
    .unwrap();
    assert_eq!(out.actions[0].action, "turn automatic NUMA balancing off");
    assert_eq!(out.actions[0].status, ActionStatus::Done);
    assert_eq!(*ran.lock().unwrap(), ["sysctl -w kernel.numa_balancing=0"]);

    // Without the live host the same plan is reported, not run.
    let out = Executor {
        host: &host,
        live: None,
        restart_timeout: Duration::from_secs(1),
        stop: &stop,
        legacy_readers: |_, _| Vec::new(),
    }
    .apply(&plan, true, &Holds::default())
    .unwrap();
    assert_eq!(out.actions[0].status, ActionStatus::Skipped);
}
