//! The two cohort rules, the same in `fleet` and in the shipped recording rules:
//! - a *minority* value is one held by fewer members than the cohort's most
//!   common value (a tie at the top flags none of the tied values), as
//!   `count by (cohort, value) < on (cohort) group_left max by (cohort) (…)`;
//! - a port is *below its cohort* when its rate is under the cohort's median,
//!   computed as PromQL's `quantile(0.5, …)` does.

use std::cmp::Ordering;
use std::collections::BTreeMap;

/// How often each value occurs in one cohort.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    counts: BTreeMap<String, usize>,
}

impl Tally {
    pub fn add(&mut self, value: &str) {
        *self.counts.entry(value.to_owned()).or_default() += 1;
    }

    fn max(&self) -> usize {
        self.counts.values().copied().max().unwrap_or(0)
    }

    /// The most common value(s), sorted.
    pub fn majority(&self) -> Vec<String> {
        let max = self.max();
        self.counts
            .iter()
            .filter(|(_, n)| **n == max)
            .map(|(v, _)| v.clone())
            .collect()
    }

    pub fn is_minority(&self, value: &str) -> bool {
        self.counts.get(value).is_some_and(|n| *n < self.max())
    }
}

/// PromQL's `quantile(q, …)` over the values: linear interpolation between
/// the closest ranks (promql/quantile.go). NaN for no value.
pub fn quantile(q: f64, values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
    let n = v.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    v[lower as usize] * (1.0 - weight) + v[upper as usize] * weight
}

/// Node names in the order people expect: `node-2` before `node-10`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (a.chars().next(), b.chars().next()) {
            (None, None) => return Ordering::Equal,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                let db = b.find(|c: char| !c.is_ascii_digit()).unwrap_or(b.len());
                let (na, nb) = (
                    a[..da].trim_start_matches('0'),
                    b[..db].trim_start_matches('0'),
                );
                let o = na
                    .len()
                    .cmp(&nb.len())
                    .then_with(|| na.cmp(nb))
                    .then_with(|| da.cmp(&db));
                if o != Ordering::Equal {
                    return o;
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(&y);
                }
                a = &a[x.len_utf8()..];
                b = &b[y.len_utf8()..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minority_is_below_the_most_common_and_a_tie_flags_nobody() {
        let mut t = Tally::default();
        for v in ["a", "a", "a", "b", "c", "c"] {
            t.add(v);
        }
        assert_eq!(t.majority(), ["a"]);
        assert!(!t.is_minority("a") && t.is_minority("b") && t.is_minority("c"));
        assert!(!t.is_minority("absent"));
        let mut tie = Tally::default();
        for v in ["x", "y", "x", "y", "z"] {
            tie.add(v);
        }
        assert_eq!(tie.majority(), ["x", "y"]);
        assert!(!tie.is_minority("x") && !tie.is_minority("y") && tie.is_minority("z"));
    }

    #[test]
    fn quantile_interpolates_as_promql_does() {
        assert!(quantile(0.5, &[]).is_nan());
        assert_eq!(quantile(0.5, &[7.0]), 7.0);
        assert_eq!(quantile(0.5, &[200.0, 100.0, 200.0]), 200.0);
        assert_eq!(quantile(0.5, &[100.0, 200.0]), 150.0);
        assert_eq!(quantile(0.5, &[1.0, 2.0, 3.0, 10.0]), 2.5);
    }

    #[test]
    fn names_sort_naturally() {
        let mut v = vec!["node-10", "node-2", "node-1", "a", "node-02", "node-b"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "node-1", "node-2", "node-02", "node-10", "node-b"]);
    }
}
