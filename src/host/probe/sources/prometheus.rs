//! The Prometheus peer source (`[peers.source] kind = "prometheus"`): the
//! fleet's running responders as the agents publish them
//! (`rdma_node_agent_peer_responder_info`: device, port, addr, rail), with each
//! port's fabric from its `port_info`. One instant query through
//! `host::prometheus` (bounded answer, timeout, no proxy, secrets never shown).

use std::path::Path;
use std::time::Duration;

use super::{MAX_PEERS, check_peer};
use crate::host::probe::record::Peer;
use crate::host::prometheus::{Auth, Options, PromError, Prometheus, Sample, Secret};

/// The responders with their fabric; a node's name from its `node` label
/// (relabeling) or its scrape target.
pub const DEFAULT_QUERY: &str = "rdma_node_agent_peer_responder_info * on (job, instance, device, port) group_left (fabric) rdma_node_agent_port_info{fabric!=\"\"}";

/// An answer's bound: ~100,000 responders with their labels.
pub const MAX_ANSWER_BYTES: u64 = 32 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PromSourceError {
    #[error("the Prometheus peer source: {0}")]
    Prom(#[from] PromError),
    #[error(
        "the Prometheus peer source at {url}: the query answered {count} series, more than {MAX_PEERS}"
    )]
    TooMany { url: String, count: usize },
}

/// The peers the query names; `query` empty: `DEFAULT_QUERY`.
pub fn load(
    url: &str,
    query: &str,
    token_file: Option<&Path>,
    timeout: Duration,
) -> Result<Vec<Peer>, PromSourceError> {
    let auth = match token_file {
        Some(p) => Auth::Bearer(Secret::from_file("bearer token file", p)?),
        None => Auth::None,
    };
    let prom = Prometheus::new(&Options {
        url: url.to_owned(),
        auth,
        ca_file: None,
        insecure_skip_verify: false,
        timeout,
        allow_http_credentials: false,
        max_answer_bytes: MAX_ANSWER_BYTES,
    })?;
    let q = if query.is_empty() {
        DEFAULT_QUERY
    } else {
        query
    };
    let samples = prom.query(q)?;
    if samples.len() > MAX_PEERS {
        return Err(PromSourceError::TooMany {
            url: url.to_owned(),
            count: samples.len(),
        });
    }
    Ok(from_samples(&samples))
}

/// The peers of an answer, pure: a series without a usable node, address or
/// fabric names no peer (it is left out, not guessed).
pub fn from_samples(samples: &[Sample]) -> Vec<Peer> {
    let get = |s: &Sample, k: &str| s.labels.get(k).cloned().unwrap_or_default();
    let mut peers: Vec<Peer> = samples
        .iter()
        .filter_map(|s| {
            let node = match get(s, "node") {
                n if !n.is_empty() => n,
                _ => {
                    let i = get(s, "instance");
                    // host:port → host; [v6]:port → v6.
                    let host = i.rsplit_once(':').map_or(i.as_str(), |(h, _)| h);
                    host.trim_matches(['[', ']']).to_owned()
                }
            };
            let p = Peer {
                node,
                addr: get(s, "addr"),
                fabric: get(s, "fabric"),
                rail: get(s, "rail").parse().ok(),
            };
            check_peer(&p).is_ok().then_some(p)
        })
        .collect();
    peers.sort();
    peers.dedup();
    peers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(labels: &[(&str, &str)]) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value: 1.0,
        }
    }

    #[test]
    fn responders_become_peers_and_unusable_series_are_left_out() {
        let peers = from_samples(&[
            sample(&[
                ("node", "gpu-002"),
                ("instance", "10.1.0.2:9470"),
                ("device", "mlx5_1"),
                ("port", "1"),
                ("addr", "10.0.1.2"),
                ("rail", "1"),
                ("fabric", "roce:10.0.1.0/24"),
            ]),
            sample(&[
                ("instance", "gpu-001:9470"),
                ("addr", "10.0.0.1"),
                ("rail", ""),
                ("fabric", "roce:10.0.0.0/24"),
            ]),
            // No fabric (the port_info join found none): not a peer.
            sample(&[("node", "gpu-003"), ("addr", "10.0.0.3"), ("fabric", "")]),
            // No address: not a peer.
            sample(&[
                ("node", "gpu-004"),
                ("addr", ""),
                ("fabric", "roce:10.0.0.0/24"),
            ]),
        ]);
        assert_eq!(
            peers,
            [
                Peer {
                    node: "gpu-001".into(),
                    addr: "10.0.0.1".into(),
                    fabric: "roce:10.0.0.0/24".into(),
                    rail: None,
                },
                Peer {
                    node: "gpu-002".into(),
                    addr: "10.0.1.2".into(),
                    fabric: "roce:10.0.1.0/24".into(),
                    rail: Some(1),
                },
            ]
        );
    }

    #[test]
    fn an_unreachable_prometheus_is_a_clear_error() {
        let e = load("http://127.0.0.1:9", "", None, Duration::from_millis(500))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "the Prometheus peer source: cannot reach Prometheus at http://127.0.0.1:9"
            ),
            "{e}"
        );
    }
}
