//! The fleet's peer-probe matrix (issue 35): every node's newest probes
//! (`rdma_node_agent_peer_probe_ok`, one series per probed peer) as edges
//! between (node, rail) units, and who is at fault. Pure and linear in the
//! edges: 1,024 nodes × 8 rails × k = 3 is about 25,000 edges.
//!
//! The rules, in order:
//! 1. A **bad rail**: on a rail of at least 3 units, 3 in 4 of its probes
//!    failed: its switch, not its nodes.
//! 2. A **culprit** (node and rail, with its ports): 3 in 4 or more of its probes
//!    failed in one direction (out or in; at least 2 of them), and most of the
//!    peers it failed with are fine with everyone else (their other probes
//!    fail less than half): the failures are common to all its peers.
//! 3. A **victim**: a unit whose failures all involve a culprit or a bad rail:
//!    it merely failed to reach them.
//! 4. What is left is **unexplained**, listed as it is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::analyse::{label, node_name};
use crate::host::prometheus::Sample;

/// A node's port on a rail (`""`: the rail is unknown).
pub type Unit = (String, String);

#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from: Unit,
    pub to: Unit,
    /// The prober's port (`mlx5_0/1`).
    pub port: String,
    pub ok: bool,
    /// The stage the probe reached (`done`, `connect`, …).
    pub stage: String,
}

/// The edges of `peer_probe_ok` samples: from the sample's node and rail to
/// its `peer` on `peer_rail` (the prober's rail when the peer's is unknown).
pub fn edges(samples: &[Sample], node_label: &str) -> Vec<Edge> {
    samples
        .iter()
        .map(|s| {
            let rail = label(s, "rail").to_owned();
            let peer_rail = match label(s, "peer_rail") {
                "" => rail.clone(),
                r => r.to_owned(),
            };
            // A peer is named by its node name; a prober without the node
            // label by its scrape target's host, so both name one unit.
            let from = match label(s, node_label) {
                "" => {
                    let i = node_name(s, node_label);
                    let host = i.rsplit_once(':').map_or(i.as_str(), |(h, _)| h);
                    host.trim_matches(['[', ']']).to_owned()
                }
                n => n.to_owned(),
            };
            Edge {
                from: (from, rail),
                to: (label(s, "peer").to_owned(), peer_rail),
                port: format!("{}/{}", label(s, "device"), label(s, "port")),
                ok: s.value == 1.0,
                stage: label(s, "stage").to_owned(),
            }
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    pub node: String,
    pub rail: String,
    /// Its ports on the rail, as its own probes name them.
    pub ports: Vec<String>,
    pub failed: usize,
    pub probes: usize,
    /// Where its own failed probes stopped, each once.
    pub stages: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BadRail {
    pub rail: String,
    pub units: usize,
    pub failed: usize,
    pub probes: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Victim {
    pub node: String,
    pub rail: String,
    /// The culprits (`node/rail`) or bad rails (`rail <r>`) it failed with.
    pub failed_with: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeerMatrix {
    pub nodes: usize,
    pub rails: Vec<String>,
    pub probes: usize,
    pub failed: usize,
    pub bad_rails: Vec<BadRail>,
    pub culprits: Vec<Culprit>,
    pub victims: Vec<Victim>,
    /// Failed probes no culprit or bad rail explains: `from -> to (stage)`.
    pub unexplained: Vec<String>,
    /// Per rail, one character per node (in `nodes` order, sorted): `.` every
    /// probe ok, `X` culprit, `R` on a bad rail, `v` victim, `!` unexplained
    /// failures, ` ` no probe.
    pub rows: Vec<(String, String)>,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    out: (usize, usize),
    inn: (usize, usize),
}

fn bad(t: (usize, usize)) -> bool {
    let (n, f) = t;
    n >= 2 && f * 4 >= n * 3
}

pub fn analyse(edges: &[Edge]) -> PeerMatrix {
    let (tally, by_rail) = tallies(edges);
    let bad_rails: Vec<BadRail> = by_rail
        .iter()
        .filter(|(_, (units, n, f))| units.len() >= 3 && bad((*n, *f)))
        .map(|(r, (units, n, f))| BadRail {
            rail: (*r).to_owned(),
            units: units.len(),
            failed: *f,
            probes: *n,
        })
        .collect();
    let mut judged = Judged {
        tally,
        bad_rails,
        culprits: Vec::new(),
    };
    judged.culprits = judged.find_culprits(edges);
    let blame = judged.blame(edges);
    let nodes: BTreeSet<&str> = judged.tally.keys().map(|u| u.0.as_str()).collect();
    let rails: BTreeSet<&str> = judged.tally.keys().map(|u| u.1.as_str()).collect();
    let rows = judged.rows(&nodes, &rails, &blame);
    PeerMatrix {
        nodes: nodes.len(),
        rails: rails.iter().map(|r| (*r).to_owned()).collect(),
        probes: edges.len(),
        failed: edges.iter().filter(|e| !e.ok).count(),
        culprits: judged.culprit_rows(edges),
        victims: blame
            .victims
            .into_iter()
            .filter(|(u, _)| !blame.unexplained_units.contains(u))
            .map(|(u, w)| Victim {
                node: u.0.clone(),
                rail: u.1.clone(),
                failed_with: w.into_iter().collect(),
            })
            .collect(),
        bad_rails: judged.bad_rails,
        unexplained: blame.unexplained,
        rows,
    }
}

/// A rail's units, and its probes within the rail and how many failed.
type RailTally<'a> = (BTreeSet<&'a Unit>, usize, usize);

/// Each unit's probes and answers (and how many failed), and per rail the
/// units on it and its probes within the rail.
fn tallies(edges: &[Edge]) -> (HashMap<&Unit, Tally>, BTreeMap<&str, RailTally<'_>>) {
    let mut tally: HashMap<&Unit, Tally> = HashMap::new();
    let mut by_rail: BTreeMap<&str, RailTally> = BTreeMap::new();
    for e in edges {
        let t = tally.entry(&e.from).or_default();
        t.out.0 += 1;
        t.out.1 += usize::from(!e.ok);
        let t = tally.entry(&e.to).or_default();
        t.inn.0 += 1;
        t.inn.1 += usize::from(!e.ok);
        if e.from.1 == e.to.1 {
            let r = by_rail.entry(e.from.1.as_str()).or_default();
            r.0.insert(&e.from);
            r.0.insert(&e.to);
            r.1 += 1;
            r.2 += usize::from(!e.ok);
        }
    }
    (tally, by_rail)
}

/// What the tallies say: the bad rails, and the culprits off them.
struct Judged<'a> {
    tally: HashMap<&'a Unit, Tally>,
    bad_rails: Vec<BadRail>,
    /// Sorted.
    culprits: Vec<&'a Unit>,
}

/// Who failed with whom, as the culprits and bad rails explain it.
struct Blame<'a> {
    victims: BTreeMap<&'a Unit, BTreeSet<String>>,
    unexplained_units: BTreeSet<&'a Unit>,
    unexplained: Vec<String>,
}

impl<'a> Judged<'a> {
    fn on_bad_rail(&self, u: &Unit) -> bool {
        self.bad_rails.iter().any(|b| b.rail == u.1)
    }

    fn is_culprit(&self, u: &Unit) -> bool {
        self.culprits.binary_search(&u).is_ok()
    }

    /// Units off a bad rail that fail most of their probes or answers, with
    /// most of their failed counterparts fine with everyone else.
    fn find_culprits(&self, edges: &'a [Edge]) -> Vec<&'a Unit> {
        let tally = &self.tally;
        // Each unit's failed counterparts, and per pair the failures, to judge a
        // counterpart "fine with everyone else".
        let mut failed_with: HashMap<&Unit, Vec<&Unit>> = HashMap::new();
        for e in edges.iter().filter(|e| !e.ok) {
            failed_with.entry(&e.from).or_default().push(&e.to);
            failed_with.entry(&e.to).or_default().push(&e.from);
        }
        let fine_without = |other: &Unit, u: &Unit| {
            let t = tally.get(other).copied().unwrap_or_default();
            let with_u = failed_with
                .get(other)
                .map_or(0, |v| v.iter().filter(|x| **x == u).count());
            let all = failed_with.get(other).map_or(0, Vec::len);
            // Its probes and answers without the ones involving u.
            let n = (t.out.0 + t.inn.0).saturating_sub(with_u);
            let f = all.saturating_sub(with_u);
            f * 2 < n || n == 0
        };
        let mut culprits: Vec<&Unit> = tally
            .iter()
            .filter(|(u, t)| !self.on_bad_rail(u) && (bad(t.out) || bad(t.inn)))
            .filter(|(u, _)| {
                let others: BTreeSet<&Unit> = failed_with
                    .get(*u)
                    .map(|v| v.iter().copied().collect())
                    .unwrap_or_default();
                let fine = others.iter().filter(|o| fine_without(o, u)).count();
                fine * 2 > others.len()
            })
            .map(|(u, _)| *u)
            .collect();
        culprits.sort();
        culprits
    }

    /// Each failed probe: a victim of the culprit or bad rail on its other
    /// end, or unexplained.
    fn blame(&self, edges: &'a [Edge]) -> Blame<'a> {
        let explained = |e: &Edge| {
            self.is_culprit(&e.from)
                || self.is_culprit(&e.to)
                || self.on_bad_rail(&e.from)
                || self.on_bad_rail(&e.to)
        };
        let name = |u: &Unit| {
            if self.on_bad_rail(u) {
                format!("rail {}", u.1)
            } else {
                format!("{}/{}", u.0, u.1)
            }
        };
        let mut b = Blame {
            victims: BTreeMap::new(),
            unexplained_units: BTreeSet::new(),
            unexplained: Vec::new(),
        };
        for e in edges.iter().filter(|e| !e.ok) {
            if !explained(e) {
                b.unexplained.push(format!(
                    "{}/{} -> {}/{} ({})",
                    e.from.0, e.from.1, e.to.0, e.to.1, e.stage
                ));
                b.unexplained_units.insert(&e.from);
                b.unexplained_units.insert(&e.to);
                continue;
            }
            for (me, other) in [(&e.from, &e.to), (&e.to, &e.from)] {
                if !self.is_culprit(me) && !self.on_bad_rail(me) {
                    b.victims.entry(me).or_default().insert(name(other));
                }
            }
        }
        b.unexplained.sort();
        b.unexplained.dedup();
        b
    }

    /// Per rail, one character per node.
    fn rows(
        &self,
        nodes: &BTreeSet<&str>,
        rails: &BTreeSet<&str>,
        blame: &Blame,
    ) -> Vec<(String, String)> {
        rails
            .iter()
            .map(|r| {
                let line: String = nodes
                    .iter()
                    .map(|n| {
                        let u: Unit = ((*n).to_owned(), (*r).to_owned());
                        if !self.tally.contains_key(&u) {
                            ' '
                        } else if self.on_bad_rail(&u) {
                            'R'
                        } else if self.is_culprit(&u) {
                            'X'
                        } else if blame.unexplained_units.contains(&u) {
                            '!'
                        } else if blame.victims.contains_key(&u) {
                            'v'
                        } else {
                            '.'
                        }
                    })
                    .collect();
                ((*r).to_owned(), line)
            })
            .collect()
    }

    /// Each culprit with its ports on the rail and where its failed probes stopped.
    fn culprit_rows(&self, edges: &[Edge]) -> Vec<Culprit> {
        let mut ports: HashMap<&Unit, BTreeSet<&str>> = HashMap::new();
        let mut stages: HashMap<&Unit, BTreeSet<&str>> = HashMap::new();
        for e in edges {
            ports.entry(&e.from).or_default().insert(&e.port);
            if !e.ok {
                stages.entry(&e.from).or_default().insert(&e.stage);
            }
        }
        let names = |m: &HashMap<&Unit, BTreeSet<&str>>, u: &Unit| {
            m.get(u)
                .map(|p| p.iter().map(|s| (*s).to_owned()).collect())
                .unwrap_or_default()
        };
        self.culprits
            .iter()
            .map(|u| {
                let t = self.tally[u];
                Culprit {
                    node: u.0.clone(),
                    rail: u.1.clone(),
                    ports: names(&ports, u),
                    failed: t.out.1 + t.inn.1,
                    probes: t.out.0 + t.inn.0,
                    stages: names(&stages, u),
                }
            })
            .collect()
    }
}

/// `fleet`'s peer-probe sections: bad rails and culprits (problems), and how
/// many peers merely failed to reach them. Nothing without probes.
pub fn render(out: &mut String, m: &PeerMatrix) {
    use std::fmt::Write;
    if m.probes == 0 {
        return;
    }
    let _ = write!(
        out,
        "\nPeer probes: {} probe(s) from {} node(s) on {} rail(s), {} failed",
        m.probes,
        m.nodes,
        m.rails.len(),
        m.failed
    );
    out.push('\n');
    super::render::section(
        out,
        "Bad rails (3 in 4 probes on the rail failed: its switch)",
        &["RAIL", "UNITS", "FAILED", "PROBES"],
        m.bad_rails
            .iter()
            .map(|b| {
                vec![
                    b.rail.clone(),
                    b.units.to_string(),
                    b.failed.to_string(),
                    b.probes.to_string(),
                ]
            })
            .collect(),
    );
    super::render::section(
        out,
        "Culprits (failures common to all their peers)",
        &["NODE", "RAIL", "PORTS", "FAILED", "STAGES"],
        m.culprits
            .iter()
            .map(|c| {
                vec![
                    c.node.clone(),
                    c.rail.clone(),
                    c.ports.join(","),
                    format!("{}/{}", c.failed, c.probes),
                    c.stages.join(","),
                ]
            })
            .collect(),
    );
    if !m.victims.is_empty() {
        let _ = writeln!(
            out,
            "\n{} node/rail(s) merely failed to reach them (their own rdma.peers warns)",
            m.victims.len()
        );
    }
    if !m.unexplained.is_empty() {
        let shown: Vec<&str> = m.unexplained.iter().take(10).map(String::as_str).collect();
        let _ = writeln!(
            out,
            "\nFailed probes no culprit explains ({}): {}",
            m.unexplained.len(),
            shown.join("; ")
        );
    }
}
