//! `kernel.change`, `kernel.modules` and `kernel.dkms` as one concern: one
//! gather of the kernel's facts serves the three checks.

use super::config::KernelConfig;
use super::{
    CHANGE, DKMS, Facts, MODULES, changed_from, check_change, check_dkms, check_modules, gather,
    hold_back_reasons, next_state, state_path,
};
use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError, Provides};
use crate::host::snapshot::Snapshot;
use crate::host::state::Record;
use crate::observe::{Observation, ObservationKind};
use crate::reason::Reason;

pub struct Kernel;

impl Concern for Kernel {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        crate::concerns::kernel::reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHANGE, MODULES, DKMS]
    }

    /// A reboot held back while a kernel lacks its DKMS builds.
    fn provides(&self) -> &'static [Provides] {
        const PROVIDES: &[Provides] = &[Provides::new(ObservationKind::RebootHeldBack, DKMS)];
        PROVIDES
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.section::<KernelConfig>().enabled
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        gather(snap, cfg.section::<KernelConfig>()).map_err(GatherError::unknown)
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let cfg = ctx.config.section::<KernelConfig>();
        let mut observations: Vec<Observation> = hold_back_reasons(f, cfg)
            .into_iter()
            .map(Observation::RebootHeldBack)
            .collect();
        if let (Some(from), Some(to)) = (changed_from(f), &f.release) {
            observations.push(Observation::KernelChanged {
                from,
                to: to.clone(),
            });
        }
        // Once an apply converged on this kernel, remember it, so a later change shows.
        let records = next_state(f)
            .map(|state| {
                let mut bytes = serde_json::to_vec_pretty(&state).expect("state serializes");
                bytes.push(b'\n');
                Record {
                    path: state_path(),
                    bytes,
                    note: state.previous.as_ref().map(|prev| {
                        format!(
                            "kernel changed from {prev} to {}: host preparation re-applied",
                            state.release
                        )
                    }),
                }
            })
            .into_iter()
            .collect();
        Decision {
            checks: vec![check_change(f), check_modules(f, cfg), check_dkms(f, cfg)],
            observations,
            records,
            ..Decision::default()
        }
    }
}
