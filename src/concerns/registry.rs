//! What the registered concerns declare, collected: their reason codes (with
//! the engine's own), from which `check --json` is read back and
//! docs/reasons.md's table is generated. `ALL` is the list; this reads it, so
//! a concern adds its codes in its own folder and nowhere else.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error as _};

use super::{containerd, driver, fleet_metrics, gpudirect, kernel, pcie, rdma, readiness, reboot};
use crate::config::section::{Declare, Declared};
use crate::engine::check::CheckId;
use crate::engine::concern::Run;
use crate::exposition::Families;
use crate::observe::{Observation, ObservationKind};
use crate::reason::Reason;

/// A concern's metric families, rendered from the cycle's observations (its
/// folder's `metrics.rs`).
pub type MetricFamilies = fn(&mut Families, &[Observation]);

/// Every concern's metric families, in the exposition's order: `/metrics`
/// renders them between the engine's check families and its reconcile
/// counters (`outputs::metrics`), and `tests/metrics_golden.rs` holds the
/// bytes. A concern with families adds its line here.
pub static METRICS: &[MetricFamilies] = &[
    rdma::devices::metrics::families,
    rdma::netns::metrics::families,
    kernel::metrics::families,
    reboot::families,
    readiness::metrics::families,
    gpudirect::metrics::gpudirect,
    pcie::metrics::aer,
    driver::metrics::driver_health,
    containerd::metrics::families,
    fleet_metrics::families,
    rdma::link::metrics::families,
    rdma::counters::metrics::counters,
    rdma::peers::metrics::families,
];

/// Every concern's config section (its folder's `config.rs`): `Config`
/// routes the file's `[table]` of that name to it, validates it at load and
/// hands it back through `Config::section::<S>()`; a table no section of the
/// agent's or of this list reads is an error. A concern with a section adds
/// its line here.
pub static SECTIONS: &[&dyn Declared] = &[
    &Declare::<rdma::counters::config::CountersConfig>::NEW,
    &Declare::<pcie::config::PcieConfig>::NEW,
    &Declare::<kernel::config::KernelConfig>::NEW,
    &Declare::<readiness::config::KubeletConfig>::NEW,
    &Declare::<driver::config::DriverHealthConfig>::NEW,
    &Declare::<rdma::peers::config::PeersConfig>::NEW,
];

/// A list of concerns and what they declare. `Registry::of(ALL)` is the
/// agent's; a test may build one with a concern of its own.
pub struct Registry<'a> {
    concerns: &'a [&'a dyn Run],
}

/// Two declarations that cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// One code declared twice with different docs (a code means one thing).
    ReasonTwice { code: &'static str },
    /// A code that is not lowercase words joined by `_`.
    ReasonMisspelt { code: &'static str },
    /// One check id reported by two concerns.
    IdTwice { id: CheckId },
    /// A kind of observation needed that no concern registered before it
    /// provides (`check --only` and the engine's dependency rule would find
    /// nothing).
    NeedUnmet { by: CheckId, need: ObservationKind },
    /// A concern says a kind it provides is known by a check it does not report.
    ProvidedByForeignCheck { by: CheckId, check: CheckId },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::ReasonTwice { code } => write!(
                f,
                "reason code {code:?} is declared twice with different docs: \
                 declare it once (a code two concerns report goes in src/reason.rs)"
            ),
            RegistryError::ReasonMisspelt { code } => write!(
                f,
                "reason code {code:?} is not lowercase words joined by `_`"
            ),
            RegistryError::IdTwice { id } => write!(f, "check id {id} is reported by two concerns"),
            RegistryError::NeedUnmet { by, need } => write!(
                f,
                "{by} needs {need} observations, which no concern registered before it \
                 provides (register it after the one that does, or declare them in that \
                 concern's provides())"
            ),
            RegistryError::ProvidedByForeignCheck { by, check } => write!(
                f,
                "{by} provides observations known by {check}, which is not one of its checks"
            ),
        }
    }
}

impl std::error::Error for RegistryError {}

impl<'a> Registry<'a> {
    pub fn of(concerns: &'a [&'a dyn Run]) -> Self {
        Registry { concerns }
    }

    /// The agent's registry: every concern of `ALL`.
    pub fn agent() -> Registry<'static> {
        Registry::of(super::ALL)
    }

    /// Everything the concerns declare holds together: check ids unique,
    /// each kind needed provided by an earlier concern through a check of its
    /// own, reason codes declared once.
    pub fn validate(&self) -> Result<(), RegistryError> {
        let mut seen: Vec<CheckId> = Vec::new();
        let mut provided: Vec<ObservationKind> = Vec::new();
        for c in self.concerns {
            let by = c
                .ids()
                .first()
                .copied()
                .unwrap_or(CheckId::new("(no check)"));
            if let Some(need) = c.needs().iter().find(|n| !provided.contains(n)) {
                return Err(RegistryError::NeedUnmet { by, need: *need });
            }
            if let Some(p) = c.provides().iter().find(|p| !c.ids().contains(&p.check)) {
                let check = p.check;
                return Err(RegistryError::ProvidedByForeignCheck { by, check });
            }
            provided.extend(c.provides().iter().map(|p| p.kind));
            for id in c.ids() {
                if seen.contains(id) {
                    return Err(RegistryError::IdTwice { id: *id });
                }
                seen.push(*id);
            }
        }
        self.reasons().map(|_| ())
    }

    /// Every reason declaration: the engine's first, then each concern's in
    /// registration order (a folder's concerns may share one list).
    fn declared(&self) -> impl Iterator<Item = Reason> + '_ {
        Reason::SHARED
            .iter()
            .chain(self.concerns.iter().flat_map(|c| c.reasons()))
            .copied()
    }

    /// Every reason code, each once, in declaration order; an error when one
    /// code is declared with two meanings or misspelt.
    pub fn reasons(&self) -> Result<Vec<Reason>, RegistryError> {
        let mut out: Vec<Reason> = Vec::new();
        for r in self.declared() {
            let code = r.as_str();
            if code.is_empty() || !code.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                return Err(RegistryError::ReasonMisspelt { code });
            }
            match out.iter().find(|o| o.as_str() == code) {
                None => out.push(r),
                Some(o) if same_docs(*o, r) => {}
                Some(_) => return Err(RegistryError::ReasonTwice { code }),
            }
        }
        Ok(out)
    }

    /// The declared reason with this code.
    pub fn reason(&self, code: &str) -> Option<Reason> {
        self.declared().find(|r| r.as_str() == code)
    }

    /// docs/reasons.md's table: one row per code, in declaration order.
    pub fn reasons_table(&self) -> Result<String, RegistryError> {
        let mut t = String::from("| code | checks | what it means | remedy |\n|---|---|---|---|\n");
        for r in self.reasons()? {
            t.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                r.as_str(),
                r.checks(),
                r.means(),
                r.remedy()
            ));
        }
        Ok(t)
    }
}

fn same_docs(a: Reason, b: Reason) -> bool {
    (a.checks(), a.means(), a.remedy()) == (b.checks(), b.means(), b.remedy())
}

/// A code read back (`status` reads the daemon's report) is one the agent
/// declares; any other is an error naming it.
impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let code = String::deserialize(d)?;
        Registry::agent()
            .reason(&code)
            .ok_or_else(|| D::Error::custom(format!("unknown reason code {code:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::concern::Provides;

    #[test]
    fn the_agents_registry_holds_together() {
        assert_eq!(Registry::agent().validate(), Ok(()));
    }

    #[test]
    fn the_agents_codes_are_declared_once_and_read_back() {
        let all = Registry::agent().reasons().unwrap();
        assert_eq!(all.len(), 90, "codes are never removed");
        for r in &all {
            let json = serde_json::to_value(r).unwrap();
            assert_eq!(json, serde_json::Value::String(r.as_str().into()));
            assert_eq!(serde_json::from_value::<Reason>(json).unwrap(), *r);
        }
        let e = serde_json::from_value::<Reason>("no_such_code".into()).unwrap_err();
        assert!(e.to_string().contains("\"no_such_code\""), "{e}");
    }

    /// A concern that declares what it is given and decides nothing.
    struct Demo {
        needs: &'static [ObservationKind],
        provides: &'static [Provides],
        reasons: &'static [Reason],
    }

    impl Run for Demo {
        fn ids(&self) -> &'static [CheckId] {
            const IDS: &[CheckId] = &[CheckId::new("demo.check")];
            IDS
        }
        fn needs(&self) -> &'static [ObservationKind] {
            self.needs
        }
        fn provides(&self) -> &'static [Provides] {
            self.provides
        }
        fn reasons(&self) -> &'static [Reason] {
            self.reasons
        }
        fn enabled(&self, _: &crate::config::Config) -> bool {
            true
        }
        fn writes(&self) -> bool {
            false
        }
        fn summarises(&self) -> bool {
            false
        }
        fn run(
            &self,
            _: &crate::host::snapshot::Snapshot,
            _: &crate::engine::concern::Ctx,
        ) -> Result<crate::engine::concern::Decision, crate::engine::concern::GatherError> {
            Ok(Default::default())
        }
        fn undo(
            &self,
            _: &crate::host::snapshot::Snapshot,
            _: &crate::config::Config,
        ) -> Vec<std::sync::Arc<dyn crate::engine::effect::Effect>> {
            Vec::new()
        }
    }

    fn with(demo: &Demo) -> Result<(), RegistryError> {
        let mut list: Vec<&dyn Run> = super::super::ALL.to_vec();
        list.push(demo);
        Registry::of(&list).validate()
    }

    #[test]
    fn a_code_with_two_meanings_is_refused() {
        const OTHER: &[Reason] = &[Reason::new("port_down", "`demo.check`", "x", "y")];
        let twice = Demo {
            needs: &[],
            provides: &[],
            reasons: OTHER,
        };
        let code = "port_down";
        assert_eq!(with(&twice), Err(RegistryError::ReasonTwice { code }));
    }

    /// What a demo concern makes: a type of its own.
    #[derive(Debug, PartialEq)]
    struct DemoSeen;

    #[test]
    fn an_unmet_need_a_foreign_provider_or_a_second_id_is_refused() {
        // A need is a kind: a misspelt one does not compile. One that no
        // concern before it makes is refused here.
        const NOBODY: &[ObservationKind] = &[ObservationKind::own::<DemoSeen>()];
        let demo = Demo {
            needs: NOBODY,
            provides: &[],
            reasons: &[],
        };
        let (by, need) = (CheckId::new("demo.check"), NOBODY[0]);
        assert_eq!(with(&demo), Err(RegistryError::NeedUnmet { by, need }));
        // Made, but by a concern registered after the reader.
        const MAKES: &[Provides] = &[Provides::new(NOBODY[0], CheckId::new("demo.check"))];
        let maker = Demo {
            needs: &[],
            provides: MAKES,
            reasons: &[],
        };
        struct Reader(Demo);
        impl Run for Reader {
            fn ids(&self) -> &'static [CheckId] {
                const IDS: &[CheckId] = &[CheckId::new("demo.reader")];
                IDS
            }
            fn needs(&self) -> &'static [ObservationKind] {
                self.0.needs
            }
            fn provides(&self) -> &'static [Provides] {
                &[]
            }
            fn reasons(&self) -> &'static [Reason] {
                &[]
            }
            fn enabled(&self, c: &crate::config::Config) -> bool {
                self.0.enabled(c)
            }
            fn writes(&self) -> bool {
                false
            }
            fn summarises(&self) -> bool {
                false
            }
            fn run(
                &self,
                s: &crate::host::snapshot::Snapshot,
                c: &crate::engine::concern::Ctx,
            ) -> Result<crate::engine::concern::Decision, crate::engine::concern::GatherError>
            {
                self.0.run(s, c)
            }
            fn undo(
                &self,
                s: &crate::host::snapshot::Snapshot,
                c: &crate::config::Config,
            ) -> Vec<std::sync::Arc<dyn crate::engine::effect::Effect>> {
                self.0.undo(s, c)
            }
        }
        let reader = Reader(Demo {
            needs: NOBODY,
            provides: &[],
            reasons: &[],
        });
        let by = CheckId::new("demo.reader");
        let list: [&dyn Run; 2] = [&reader, &maker];
        assert_eq!(
            Registry::of(&list).validate(),
            Err(RegistryError::NeedUnmet { by, need })
        );
        let list: [&dyn Run; 2] = [&maker, &reader];
        assert_eq!(Registry::of(&list).validate(), Ok(()));
        // What it provides is known by a check of its own.
        const FOREIGN: &[Provides] = &[Provides::new(NOBODY[0], CheckId::new("rdma.devices"))];
        let foreign = Demo {
            needs: &[],
            provides: FOREIGN,
            reasons: &[],
        };
        let (by, check) = (CheckId::new("demo.check"), CheckId::new("rdma.devices"));
        assert_eq!(
            with(&foreign),
            Err(RegistryError::ProvidedByForeignCheck { by, check })
        );
        let demo = Demo {
            needs: &[],
            provides: &[],
            reasons: &[],
        };
        let list: [&dyn Run; 2] = [&demo, &demo];
        let id = CheckId::new("demo.check");
        assert_eq!(
            Registry::of(&list).validate(),
            Err(RegistryError::IdTwice { id })
        );
        // A kind the agent's concerns provide.
        const PORTS: &[ObservationKind] = &[ObservationKind::Port];
        assert_eq!(
            with(&Demo {
                needs: PORTS,
                provides: &[],
                reasons: &[]
            }),
            Ok(())
        );
    }
}
