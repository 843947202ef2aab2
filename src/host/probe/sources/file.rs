//! The peers file (`[peers.source] kind = "file"`): the fleet's RDMA ports as
//! `[[peer]]` tables (`node`, `addr`, `fabric`, `rail`), which the Ansible role
//! templates from its inventory. Read under the root, bounded in size and
//! count; an unknown key or a bad value names the entry and what to write.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{MAX_PEERS, check_peer};
use crate::host::Host;
use crate::host::probe::record::Peer;

/// The largest peers file read: ~100,000 entries of ~80 bytes, with room.
pub const MAX_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(
        "cannot read the peers file {path}: {source} (write it, or set [peers.source] to where it is)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the peers file {path} is larger than {} MiB: no fleet's list reaches that; is it the right file?", MAX_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error("the peers file {path} does not parse: {why}")]
    Parse { path: PathBuf, why: String },
    #[error("the peers file {path}: peer {index} ({node}): {why}")]
    Peer {
        path: PathBuf,
        index: usize,
        node: String,
        why: String,
    },
    #[error("the peers file {path} lists {count} peers, more than {MAX_PEERS}")]
    TooMany { path: PathBuf, count: usize },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeersFile {
    #[serde(default)]
    peer: Vec<FilePeer>,
}

/// One `[[peer]]`: `Peer`'s fields, strictly (a misspelt key is an error, not
/// a default).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePeer {
    node: String,
    addr: String,
    fabric: String,
    rail: Option<u32>,
}

/// The peers in `path` (a host path, under the root).
pub fn load(host: &Host, path: &Path) -> Result<Vec<Peer>, FileError> {
    let real = host.path(path);
    let read = |source| FileError::Read {
        path: real.clone(),
        source,
    };
    let f = std::fs::File::open(&real).map_err(read)?;
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(FileError::TooLarge { path: real });
    }
    let text = String::from_utf8(bytes).map_err(|_| FileError::Parse {
        path: real.clone(),
        why: "not UTF-8".into(),
    })?;
    parse(&text, &real)
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
    (before.matches('\n').count() + 1, col + 1)
}

/// The peers of a peers file's text; `shown` names it in errors.
pub fn parse(text: &str, shown: &Path) -> Result<Vec<Peer>, FileError> {
    let file: PeersFile = toml::from_str(text).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        FileError::Parse {
            path: shown.to_owned(),
            why: format!("{line}:{col}: {}", e.message()),
        }
    })?;
    if file.peer.len() > MAX_PEERS {
        return Err(FileError::TooMany {
            path: shown.to_owned(),
            count: file.peer.len(),
        });
    }
    let mut peers: Vec<Peer> = file
        .peer
        .into_iter()
        .map(|p| Peer {
            node: p.node,
            addr: p.addr,
            fabric: p.fabric,
            rail: p.rail,
        })
        .collect();
    for (i, p) in peers.iter().enumerate() {
        check_peer(p).map_err(|why| FileError::Peer {
            path: shown.to_owned(),
            index: i + 1,
            node: p.node.clone(),
            why,
        })?;
    }
    peers.sort();
    peers.dedup();
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOWN: &str = "/etc/rdma-node-agent/peers.toml";

    #[test]
    fn a_templated_file_parses_into_sorted_unique_peers() {
        let text = r#"
[[peer]]
node = "gpu-002"
addr = "10.0.1.2"
fabric = "roce:10.0.1.0/24"
rail = 1

[[peer]]
node = "gpu-001"
addr = "10.0.0.1"
fabric = "roce:10.0.0.0/24"
rail = 0

[[peer]]
node = "ib-001"
addr = "192.168.0.1"
fabric = "ib:fe80:0000:0000:0000"
"#;
        let p = parse(text, Path::new(SHOWN)).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].node, "gpu-001");
        assert_eq!(p[2].rail, None);
        assert!(parse("", Path::new(SHOWN)).unwrap().is_empty());
    }

    #[test]
    fn bad_entries_are_named_with_what_to_write() {
        let err = |t: &str| parse(t, Path::new(SHOWN)).unwrap_err().to_string();
        let e =
            err("[[peer]]\nnode = \"a\"\naddr = \"10.0.0.300\"\nfabric = \"roce:10.0.0.0/24\"\n");
        assert_eq!(
            e,
            "the peers file /etc/rdma-node-agent/peers.toml: peer 1 (a): addr \"10.0.0.300\" is not an IP address"
        );
        let e = err("[[peer]]\nnode = \"a\"\naddr = \"10.0.0.3\"\nfabric = \"10.0.0.0/24\"\n");
        assert!(e.contains("fabric \"10.0.0.0/24\" is neither"), "{e}");
        let e = err(
            "[[peer]]\nnode = \"a\"\naddr = \"10.0.0.3\"\nfabric = \"roce:10.0.0.0/24\"\nrail = 64\n",
        );
        assert!(e.contains("rail 64 is above 63"), "{e}");
        let e = err(
            "[[peer]]\nnode = \"a\"\naddr = \"10.0.0.3\"\nfabric = \"ib:fe80::\"\nadr = \"x\"\n",
        );
        assert!(
            e.contains("does not parse: ") && e.contains("unknown field `adr`"),
            "{e}"
        );
        let e = err("[[peer]]\nnode = \"a\"\n");
        assert!(e.contains("missing field `addr`"), "{e}");
    }

    #[test]
    fn a_missing_or_oversized_file_is_a_clear_error() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let e = load(&host, Path::new("/etc/rdma-node-agent/peers.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read the peers file"), "{e}");
        let dir = root.path().join("etc/rdma-node-agent");
        std::fs::create_dir_all(&dir).unwrap();
        let big = "# padding\n".repeat((MAX_BYTES / 10 + 1) as usize);
        std::fs::write(dir.join("peers.toml"), big).unwrap();
        let e = load(&host, Path::new("/etc/rdma-node-agent/peers.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than 16 MiB"), "{e}");
    }
}
