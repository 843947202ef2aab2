//! The `pcie.aer` families of the exposition (see `metrics`). Within the
//! node's series budget: a healthy node exports the two summary series only
//! (the families are declared even with nothing watched, so rules can name them);
//! a function gets its `pcie_aer_errors_total` series (all three severities,
//! so a later first fatal is a rise of an existing series) once it has had an
//! AER error this boot, and a `pcie_link_retrained_down` series while its link
//! runs below what it trained at earlier this boot.

use crate::exposition::{Families, Kind};
use crate::observe::Observation;

const SEVERITIES: [&str; 3] = ["correctable", "nonfatal", "fatal"];

pub fn aer(m: &mut Families, seen: &[Observation]) {
    let watched: Vec<(&String, Option<[u64; 3]>, bool)> = seen
        .iter()
        .filter_map(|o| match o {
            Observation::PcieAer {
                function,
                totals,
                retrained_down,
            } => Some((function, *totals, *retrained_down)),
            _ => None,
        })
        .collect();
    let errors = m.family(
        "pcie_aer_errors",
        Kind::Counter,
        "PCIe AER errors the kernel counted since boot on a function of an RDMA NIC's or GPU's path (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal; severity correctable|nonfatal|fatal); series only for functions with an error this boot. Resets at reboot",
    );
    for (function, totals, _) in &watched {
        let Some(t) = totals.filter(|t| t.iter().any(|n| *n > 0)) else {
            continue;
        };
        for (sev, n) in SEVERITIES.iter().zip(t) {
            errors.sample(
                vec![
                    ("function", (*function).clone()),
                    ("severity", (*sev).into()),
                ],
                n as f64,
            );
        }
    }
    let functions = m.family(
        "pcie_aer_functions",
        Kind::Gauge,
        "PCIe functions pcie.aer watches (RDMA NICs, GPUs, the bridges above them): state=watched all of them, state=without_aer those whose AER statistics are absent or unreadable (their errors are not known)",
    );
    let without = watched.iter().filter(|(_, t, _)| t.is_none()).count();
    functions.sample(vec![("state", "watched".into())], watched.len() as f64);
    functions.sample(vec![("state", "without_aer".into())], without as f64);
    let down = m.family(
        "pcie_link_retrained_down",
        Kind::Gauge,
        "1 while a watched function's PCIe link runs slower or narrower than it trained earlier this boot; no series otherwise",
    );
    for (function, _, retrained) in &watched {
        if *retrained {
            down.sample(vec![("function", (*function).clone())], 1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Format;

    #[test]
    fn series_only_for_functions_with_errors_plus_the_summary() {
        let seen = vec![
            Observation::PcieAer {
                function: "0000:03:00.0".into(),
                totals: Some([0, 0, 1]),
                retrained_down: false,
            },
            Observation::PcieAer {
                function: "0000:00:10.0".into(),
                totals: Some([0, 0, 0]),
                retrained_down: true,
            },
            Observation::PcieAer {
                function: "0000:05:00.0".into(),
                totals: None,
                retrained_down: false,
            },
        ];
        let mut m = Families::new("rdma_node_agent");
        aer(&mut m, &seen);
        let text = m.render(Format::Text);
        for want in [
            "rdma_node_agent_pcie_aer_errors_total{function=\"0000:03:00.0\",severity=\"correctable\"} 0\n",
            "rdma_node_agent_pcie_aer_errors_total{function=\"0000:03:00.0\",severity=\"fatal\"} 1\n",
            "rdma_node_agent_pcie_aer_functions{state=\"watched\"} 3\n",
            "rdma_node_agent_pcie_aer_functions{state=\"without_aer\"} 1\n",
            "rdma_node_agent_pcie_link_retrained_down{function=\"0000:00:10.0\"} 1\n",
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
        assert!(
            !text.contains("function=\"0000:00:10.0\",severity"),
            "{text}"
        );
        // No function watched (the check is off, or nothing on PCI): the
        // families are declared, the summary says 0.
        let mut m = Families::new("rdma_node_agent");
        aer(&mut m, &[]);
        let text = m.render(Format::Text);
        assert!(
            text.contains("# TYPE rdma_node_agent_pcie_aer_errors_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("rdma_node_agent_pcie_aer_functions{state=\"watched\"} 0\n"),
            "{text}"
        );
    }
}
