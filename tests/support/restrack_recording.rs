//! Reads a recording of the kernel's answers to RDMA resource dumps, as the VM
//! tier's guest writes it (tests/vm/guest.sh `record_restrack`): one line per
//! dump, `CMD DEV HEX...`, each HEX one datagram the kernel sent.

use rdma_node_agent::host::netlink::restrack::{self, Kind, Step};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The payloads of the answer to command `cmd` (on any device), through the
/// agent's own reader; panics if the dump did not end with NLMSG_DONE.
pub fn payloads(recording: &str, cmd: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for line in recording.lines() {
        let mut f = line.split_whitespace();
        if f.next().and_then(|c| c.parse::<u16>().ok()) != Some(cmd) {
            continue;
        }
        let _dev = f.next();
        let mut end = Step::More;
        for datagram in f.map(unhex) {
            // The sequence number of the first message: the request's.
            let seq = u32::from_ne_bytes(datagram[8..12].try_into().unwrap());
            end = restrack::collect(&datagram, cmd, seq, &mut out)
                .unwrap_or_else(|e| panic!("command {cmd}: {e}"));
        }
        assert_eq!(end, Step::Done, "command {cmd}: no NLMSG_DONE");
    }
    out
}

/// The owners the recorded dumps of `kind` name, sorted.
pub fn pids(recording: &str, kind: Kind) -> Vec<u32> {
    let mut pids: Vec<u32> = payloads(recording, kind.cmd)
        .iter()
        .flat_map(|p| restrack::parse_pids(p, kind).unwrap())
        .collect();
    pids.sort_unstable();
    pids
}

/// The PIDs `rdma resource show pd` printed (`... pid 343 comm ib_write_bw`).
pub fn iproute2_pids(listing: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = listing
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.position(|x| x == "pid")?;
            w.next()?.parse().ok()
        })
        .collect();
    pids.sort_unstable();
    pids
}
