//! The worked example of DEVELOPMENT.md ("Adding a check"), compiled and run:
//! a concern with a live action, a reason code, a metric family and a config
//! section, written entirely outside the engine and `Config` (here, outside
//! the crate), planned by the unchanged engine and carried out by the
//! unchanged executor; its reason code, its families and its section reach
//! the registry (docs/reasons.md's table, JSON read back, `/metrics`, the
//! config file's parse and checks) through its registration lines alone. If
//! adding one ever needs an edit to `src/engine/`, `src/config.rs` or another
//! central list, this file stops compiling or fails. Its observations are its
//! own type (`Observation::Own`), and a later concern needs them by that type
//! (`ObservationKind::own::<Knob>()`): a misspelt need does not compile.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdma_node_agent::concerns::registry::SECTIONS;
use rdma_node_agent::config::Config;
use rdma_node_agent::config::section::{Declare, Declared, Invalid, Section};
use rdma_node_agent::engine::check::{Check, CheckId, Status};
use rdma_node_agent::engine::concern::{Concern, Ctx, Decision, GatherError, Provides, Run};
use rdma_node_agent::engine::effect::{
    CommandError, Effect, EffectError, EffectKey, LiveCtx, LiveHost, Ran,
};
use rdma_node_agent::engine::executor::{Executor, Live};
use rdma_node_agent::engine::holds::Holds;
use rdma_node_agent::engine::outcome::ActionStatus;
use rdma_node_agent::engine::plan::{Action, ActionKind};
use rdma_node_agent::engine::{Scope, assess};
use rdma_node_agent::exposition::Families;
use rdma_node_agent::host::Host;
use rdma_node_agent::host::live_files::LiveFiles;
use rdma_node_agent::host::netlink::{NetlinkError, RdmaNetlink};
use rdma_node_agent::host::snapshot::Snapshot;
use rdma_node_agent::host::stop::Stop;
use rdma_node_agent::observe::{Observation, ObservationKind, Own, owned};
use rdma_node_agent::outputs::Cycle;
use rdma_node_agent::reason::Reason;

// ---- the concern's folder: src/concerns/kernel/numa.rs, say ----

const CHECK_ID: CheckId = CheckId::new("kernel.numa_balancing");
const KNOB: &str = "/proc/sys/kernel/numa_balancing";

/// Its config section, `[numa_balancing]` (src/concerns/kernel/numa/config.rs):
/// strict keys with defaults, and the checks serde's types cannot make.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NumaConfig {
    /// Report `kernel.numa_balancing` at all.
    enabled: bool,
    /// The sysctl file read and turned off.
    knob: PathBuf,
}

impl Default for NumaConfig {
    fn default() -> Self {
        NumaConfig {
            enabled: true,
            knob: KNOB.into(),
        }
    }
}

impl Section for NumaConfig {
    const NAME: &'static str = "numa_balancing";

    fn validate(&self) -> Result<(), Invalid> {
        // Anything else would be read (and written) as if it were the sysctl.
        if !self.knob.starts_with("/proc/sys/") {
            return Err(Invalid::new(
                "knob",
                format!(
                    "{} is not a sysctl file under /proc/sys/",
                    self.knob.display()
                ),
            ));
        }
        Ok(())
    }
}

/// Automatic NUMA balancing migrates pages under registered RDMA memory;
/// GPU/RDMA hosts usually turn it off.
struct NumaBalancing;

/// What it observed, for its metric: its own type, in its own folder
/// (carried as `Observation::Own`; src/observe.rs is not edited).
#[derive(Debug, PartialEq)]
struct Knob {
    on: Option<bool>,
}

/// Its reason codes, with their docs row (src/concerns/kernel/numa/reasons.rs).
mod reasons {
    rdma_node_agent::reasons! {
        NUMA_BALANCING_ON = "numa_balancing_on" {
            checks: "`kernel.numa_balancing`",
            means: "automatic NUMA balancing is on: it migrates pages under registered RDMA memory",
            remedy: "`sysctl -w kernel.numa_balancing=0` (apply does it)",
        },
    }
}

impl Concern for NumaBalancing {
    type Facts = Option<String>;

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    // What later concerns may read of it, known as its check is.
    fn provides(&self) -> &'static [Provides] {
        const KNOB_SEEN: &[Provides] = &[Provides::new(ObservationKind::own::<Knob>(), CHECK_ID)];
        KNOB_SEEN
    }

    // Its section, read through the typed accessor: `Config` names no concern's.
    fn enabled(&self, cfg: &Config) -> bool {
        cfg.section::<NumaConfig>().enabled
    }

    // Reads only: the snapshot gives a read-only view of the host.
    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Option<String>, GatherError> {
        snap.read_string(&cfg.section::<NumaConfig>().knob)
            .map_err(GatherError::unknown)
    }

    fn decide(&self, knob: &Option<String>, _ctx: &Ctx) -> Decision {
        let (check, actions) = match knob.as_deref().map(str::trim) {
            None => (
                Check::new(CHECK_ID, Status::Unknown, format!("{KNOB} cannot be read"))
                    .with_reason(Reason::FACT_UNREADABLE),
                vec![],
            ),
            Some("0") => (Check::new(CHECK_ID, Status::Ok, "off"), vec![]),
            Some(v) => (
                Check::new(CHECK_ID, Status::Warn, format!("on ({v})"))
                    .with_reason(reasons::NUMA_BALANCING_ON),
                vec![Action {
                    kind: ActionKind::Effect(Arc::new(TurnOff)),
                    reason: format!("{KNOB} is {v}"),
                }],
            ),
        };
        let on = knob.as_deref().map(|v| v.trim() != "0");
        Decision {
            checks: vec![check],
            actions,
            observations: vec![Observation::Own(Own::new(Knob { on }))],
            ..Decision::default()
        }
    }
}

/// A later concern that reads the example's observations (its own folder):
/// it needs them by their type, registered after the one that provides them.
struct NumaReport;

const REPORT_ID: CheckId = CheckId::new("kernel.numa_report");

impl Concern for NumaReport {
    type Facts = ();

    fn ids(&self) -> &'static [CheckId] {
        &[REPORT_ID]
    }

    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    fn needs(&self) -> &'static [ObservationKind] {
        const KNOB: &[ObservationKind] = &[ObservationKind::own::<Knob>()];
        KNOB
    }

    fn enabled(&self, _cfg: &Config) -> bool {
        true
    }

    fn gather(&self, _snap: &Snapshot, _cfg: &Config) -> Result<(), GatherError> {
        Ok(())
    }

    fn decide(&self, _: &(), ctx: &Ctx) -> Decision {
        let on: Vec<Option<bool>> = owned::<Knob>(ctx.observations).map(|k| k.on).collect();
        Decision {
            checks: vec![Check::new(REPORT_ID, Status::Ok, format!("{on:?}"))],
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

// ---- the registration lines: `&kernel::numa::NumaBalancing,` in concerns::ALL,
// ---- `&Declare::<kernel::numa::config::NumaConfig>::NEW,` in registry::SECTIONS ----

static REGISTERED: &[&dyn Run] = &[&NumaBalancing];

/// The agent's sections and the example's, as `registry::SECTIONS` would list them.
fn sections() -> Vec<&'static dyn Declared> {
    let mut list = SECTIONS.to_vec();
    list.push(&Declare::<NumaConfig>::NEW);
    list
}

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

/// Its reason codes reach the registry through its registration line alone:
/// docs/reasons.md's table gets its row, and `check --json` read back knows it.
#[test]
fn its_reason_codes_come_with_its_registration_line() {
    use rdma_node_agent::concerns::registry::Registry;
    let mut list: Vec<&dyn Run> = rdma_node_agent::concerns::ALL.to_vec();
    list.extend(REGISTERED);
    let registry = Registry::of(&list);
    assert!(
        registry
            .reasons()
            .unwrap()
            .contains(&reasons::NUMA_BALANCING_ON)
    );
    let table = registry.reasons_table().unwrap();
    assert!(
        table.contains("| `numa_balancing_on` | `kernel.numa_balancing` | automatic NUMA"),
        "{table}"
    );
    assert_eq!(
        registry.reason("numa_balancing_on"),
        Some(reasons::NUMA_BALANCING_ON)
    );
    assert_eq!(Registry::agent().reason("numa_balancing_on"), None);
}

// ---- its metric families: src/concerns/<area>/metrics.rs, and a line in
// ---- concerns::registry::METRICS ----

/// A family from the concern's own observation type, read back by type.
fn demo_families(m: &mut Families, seen: &[Observation]) {
    for knob in owned::<Knob>(seen) {
        if let Some(on) = knob.on {
            m.gauge(
                "demo_numa_balancing",
                "Whether automatic NUMA balancing is on",
                f64::from(u8::from(on)),
            );
        }
    }
}

/// The metric reaches `/metrics` through its registry line alone: the
/// exposition renders the registered families, the engine's around them.
#[test]
fn its_metric_families_come_with_their_registry_line() {
    use rdma_node_agent::concerns::registry::{METRICS, MetricFamilies};
    use rdma_node_agent::exposition::Format;
    use rdma_node_agent::outputs::metrics::{Totals, families};

    // The observations its decide made on a node where the knob is on.
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(t.path().join(KNOB.trim_start_matches('/')), "1\n").unwrap();
    let a = assess(
        &Snapshot::new(Host::new(t.path())),
        &Config::default(),
        REGISTERED,
        Scope::All,
        false,
    );
    let mut cycle = Cycle::failed("test".into(), "no report".into());
    cycle.observations = a.observations;
    let mut list: Vec<MetricFamilies> = METRICS.to_vec();
    list.push(demo_families);
    let text = families(&cycle, Totals::default(), &list).render(Format::Text);
    assert!(
        text.contains(
            "# TYPE rdma_node_agent_demo_numa_balancing gauge\nrdma_node_agent_demo_numa_balancing 1\n"
        ),
        "{text}"
    );
    // Between the concerns' families and the engine's reconcile counters.
    let at = |name: &str| text.find(name).unwrap_or_else(|| panic!("{name}: {text}"));
    assert!(at("rdma_node_agent_port_active") < at("rdma_node_agent_demo_numa_balancing"));
    assert!(at("rdma_node_agent_demo_numa_balancing") < at("rdma_node_agent_reconciles_total"));
    let agent = families(&cycle, Totals::default(), METRICS).render(Format::Text);
    assert!(!agent.contains("demo_numa_balancing"));
}

// ---- its config section: parsed, defaulted, checked and located through the
// ---- registration line alone ----

fn parse(text: &str, sections: &[&dyn Declared]) -> Result<Config, String> {
    Config::parse(
        text,
        Path::new("/etc/rdma-node-agent/config.toml"),
        sections,
    )
    .map_err(|e| e.to_string())
}

#[test]
fn its_config_section_comes_with_its_registration_line() {
    // Defaults: a file without the table, and a config never parsed.
    let empty = parse("", &sections()).unwrap();
    assert_eq!(empty.section::<NumaConfig>(), &NumaConfig::default());
    assert!(Config::default().section::<NumaConfig>().enabled);
    assert_eq!(empty, Config::default());

    // The file's values reach the concern: disabled, it reports nothing.
    let off = parse("[numa_balancing]\nenabled = false\n", &sections()).unwrap();
    assert!(!off.section::<NumaConfig>().enabled);
    assert_ne!(off, Config::default());
    let t = tempfile::tempdir().unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    let a = assess(&snap, &off, REGISTERED, Scope::All, false);
    assert_eq!(a.checks[0].status, Status::Skipped, "{:?}", a.checks);
    assert!(a.plan.unwrap().actions.is_empty());

    // Its knob is the one read.
    std::fs::create_dir_all(t.path().join("proc/sys/vm")).unwrap();
    std::fs::write(t.path().join("proc/sys/vm/numa_knob"), "0\n").unwrap();
    let moved = "[numa_balancing]\nknob = \"/proc/sys/vm/numa_knob\"\n";
    let cfg = parse(moved, &sections()).unwrap();
    let a = assess(&snap, &cfg, REGISTERED, Scope::All, false);
    assert_eq!(a.checks[0].status, Status::Ok, "{:?}", a.checks);

    // A value it cannot use is refused at load, located, with what is wrong.
    let bad = "[daemon]\n[numa_balancing]\nknob = \"/etc/numa\"\n";
    assert_eq!(
        parse(bad, &sections()).unwrap_err(),
        "/etc/rdma-node-agent/config.toml:3:1: knob under [numa_balancing]: /etc/numa is not a sysctl file under /proc/sys/"
    );
    // A key it does not have, too, as serde names it.
    let typo = parse("[numa_balancing]\nenable = false\n", &sections()).unwrap_err();
    assert!(
        typo.starts_with("/etc/rdma-node-agent/config.toml:2:1: unknown field `enable`"),
        "{typo}"
    );

    // Without its registration line the table is unknown to the agent, with
    // the table names it does know.
    let e = parse("[numa_balancing]\nenabled = false\n", SECTIONS).unwrap_err();
    assert!(
        e.contains("unknown field `numa_balancing`, expected one of `mode`"),
        "{e}"
    );
}

// ---- a typed need: another concern reads its observations by their type ----

#[test]
fn its_observations_are_needed_by_type() {
    use rdma_node_agent::concerns::registry::{Registry, RegistryError};
    let with = |extra: &[&'static dyn Run]| {
        let mut list: Vec<&dyn Run> = rdma_node_agent::concerns::ALL.to_vec();
        list.extend(extra);
        Registry::of(&list).validate()
    };
    assert_eq!(with(&[&NumaBalancing, &NumaReport]), Ok(()));
    // Registered before what it reads: refused, naming the kind.
    let need = ObservationKind::own::<Knob>();
    assert_eq!(
        with(&[&NumaReport, &NumaBalancing]),
        Err(RegistryError::NeedUnmet {
            by: REPORT_ID,
            need
        })
    );
    assert!(format!("{need}").contains("Knob"), "{need}");

    // `check --only kernel.numa_report` runs the concern that provides it too.
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(t.path().join(KNOB.trim_start_matches('/')), "1\n").unwrap();
    let list: [&dyn Run; 2] = [&NumaBalancing, &NumaReport];
    let only = ["kernel.numa_report".to_owned()];
    let snap = Snapshot::new(Host::new(t.path()));
    let a = assess(&snap, &Config::default(), &list, Scope::Only(&only), false);
    let got: Vec<(&str, Status, &str)> = a
        .checks
        .iter()
        .map(|c| (c.id.as_str(), c.status, c.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("kernel.numa_balancing", Status::Warn, "on (1)"),
            ("kernel.numa_report", Status::Ok, "[Some(true)]"),
        ]
    );

    // While the check that provides it is unknown, so is the reader.
    std::fs::remove_file(t.path().join(KNOB.trim_start_matches('/'))).unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    let a = assess(&snap, &Config::default(), &list, Scope::Only(&only), false);
    assert_eq!(a.checks[1].status, Status::Unknown);
    assert_eq!(a.checks[1].reason, Some(Reason::DEPENDENCY_UNKNOWN));
    assert!(
        a.checks[1]
            .message
            .starts_with("not established: it reads kernel.numa_balancing, which is unknown"),
        "{}",
        a.checks[1].message
    );
}
