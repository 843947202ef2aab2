//! What a concern needs of those before it, resolved through the list: the
//! kinds of observation it reads (`Concern::needs`) to the checks of the
//! concerns that provide them (`Concern::provides`), for `check --only` and
//! for the rule that a reader of unknown facts is unknown too.

use std::collections::BTreeSet;

use super::check::{Check, CheckId, Status};
use super::concern::Run;
use crate::observe::ObservationKind;

/// The concerns `only` asks for, with those that provide what they need.
pub(super) fn selected(concerns: &[&dyn Run], only: &[String]) -> Vec<bool> {
    let wanted: BTreeSet<&str> = only.iter().map(String::as_str).collect();
    let mut kinds: Vec<ObservationKind> = Vec::new();
    // Providers are registered earlier: walk back once, adding what each needs.
    let mut keep = vec![false; concerns.len()];
    for (i, c) in concerns.iter().enumerate().rev() {
        let asked = c.ids().iter().any(|id| wanted.contains(id.as_str()));
        if asked || c.provides().iter().any(|p| kinds.contains(&p.kind)) {
            keep[i] = true;
            kinds.extend(c.needs());
        }
    }
    keep
}

/// The checks that say whether what `c` needs is known: for each kind it
/// needs, the providing check of every concern before it that makes that
/// kind, in registration order; a kind none of them makes is an `Err`.
pub(super) fn need_checks(
    before: &[&dyn Run],
    c: &dyn Run,
) -> Vec<Result<CheckId, ObservationKind>> {
    let mut out: Vec<Result<CheckId, ObservationKind>> = Vec::new();
    for kind in c.needs() {
        let mut found = before
            .iter()
            .flat_map(|b| b.provides())
            .filter(|p| p.kind == *kind)
            .map(|p| Ok(p.check))
            .peekable();
        if found.peek().is_none() {
            out.push(Err(*kind));
        }
        for check in found {
            if !out.contains(&check) {
                out.push(check);
            }
        }
    }
    out
}

/// The needs whose facts are not known, each with why: a check that is
/// `unknown`, one whose concern could not gather (it left no observations),
/// one that was not reported at all, or a kind no concern before it makes.
pub(super) fn unknown_needs(
    needs: &[Result<CheckId, ObservationKind>],
    checks: &[Check],
    not_gathered: &BTreeSet<CheckId>,
) -> Vec<String> {
    needs
        .iter()
        .filter_map(|need| {
            let need = match need {
                Ok(id) => id,
                Err(kind) => {
                    return Some(format!(
                        "{kind} observations, which no concern before it provides"
                    ));
                }
            };
            match checks.iter().find(|c| c.id == *need) {
                None => Some(format!("{need}, which was not assessed")),
                Some(c) if not_gathered.contains(need) => Some(format!(
                    "{need}, whose facts could not be gathered ({}: {})",
                    c.status.as_str(),
                    c.message
                )),
                Some(c) if c.status == Status::Unknown => {
                    Some(format!("{need}, which is unknown ({})", c.message))
                }
                Some(_) => None,
            }
        })
        .collect()
}
