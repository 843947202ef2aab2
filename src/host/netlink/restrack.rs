//! RDMA resource tracking over NLDEV, as `rdma resource show` asks it: which
//! processes hold RDMA resources, from the kernel, at a cost that grows with the
//! resources rather than with every open file of every process.
//!
//! The kernel's per-kind dump (`res_get_common_dumpit` in
//! drivers/infiniband/core/nldev.c) needs the device index in the request, so
//! the devices are dumped first (`RDMA_NLDEV_CMD_GET`), then each kind per
//! device, as iproute2's rdma/res-*.c do. Each entry names its owner with
//! `RDMA_NLDEV_ATTR_RES_PID` (`task_pid_vnr`: the PID as the asking process sees
//! it; the agent runs in the initial PID namespace, so host PIDs), or with
//! `RDMA_NLDEV_ATTR_RES_KERN_NAME` when the kernel owns it (skipped here). The
//! dumps need no capability. Only the devices of the asking socket's network
//! namespace are dumped (`ib_device_get_by_index(sock_net(..))`): with the netns
//! mode exclusive, a device moved into a pod's namespace is not seen.
//! Constants are the kernel's include/uapi/rdma/rdma_netlink.h (checked against
//! the installed header by tests/netlink_golden.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, NetlinkAddr, recv, sendto};

use super::{
    NLA_HDRLEN, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NetlinkError, Reply, Socket,
    attributes, decode_error, header, kernel_error, msg_type, u32_at,
};
use crate::host::read::ReadHost;

pub const RDMA_NLDEV_CMD_GET: u16 = 1;
pub const RDMA_NLDEV_CMD_RES_QP_GET: u16 = 10;
pub const RDMA_NLDEV_CMD_RES_CM_ID_GET: u16 = 11;
pub const RDMA_NLDEV_CMD_RES_MR_GET: u16 = 13;
pub const RDMA_NLDEV_CMD_RES_PD_GET: u16 = 14;
pub const RDMA_NLDEV_CMD_RES_CTX_GET: u16 = 22;
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
pub const RDMA_NLDEV_ATTR_RES_PID: u16 = 28;
pub const RDMA_NLDEV_ATTR_RES_KERN_NAME: u16 = 29;
/// `NLM_F_ROOT | NLM_F_MATCH` (linux/netlink.h).
pub const NLM_F_DUMP: u16 = 0x300;
/// Owned entries read from the kernel in one ask, at most: any process can
/// create millions of PDs. The answer is read a datagram at a time, and past
/// this bound it is not used (the fd scan stands in, saying why).
pub const MAX_ENTRIES: usize = 1 << 18;
/// Devices in the device dump, at most.
pub const MAX_DEVICES: usize = 4096;

/// A kind of resource: its dump command and the nested table and entry
/// attributes of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub name: &'static str,
    pub cmd: u16,
    pub table: u16,
    pub entry: u16,
}

pub const CTX: Kind = Kind {
    name: "ctx",
    cmd: RDMA_NLDEV_CMD_RES_CTX_GET,
    table: 86,
    entry: 87,
};
pub const PD: Kind = Kind {
    name: "pd",
    cmd: RDMA_NLDEV_CMD_RES_PD_GET,
    table: 46,
    entry: 47,
};
pub const CM_ID: Kind = Kind {
    name: "cm_id",
    cmd: RDMA_NLDEV_CMD_RES_CM_ID_GET,
    table: 30,
    entry: 31,
};
pub const QP: Kind = Kind {
    name: "qp",
    cmd: RDMA_NLDEV_CMD_RES_QP_GET,
    table: 19,
    entry: 20,
};
pub const MR: Kind = Kind {
    name: "mr",
    cmd: RDMA_NLDEV_CMD_RES_MR_GET,
    table: 40,
    entry: 41,
};

/// The kinds asked. A verbs user gets a ucontext (`ctx`) when it opens the
/// device (rdma-core's ibv_open_device), and every QP, MR and SRQ lies in a
/// protection domain (`pd`) of the same process; an rdma_cm user bound to a
/// device has a `cm_id`. QPs and MRs would only repeat those owners, at a cost
/// that grows with registrations. A kernel without the ctx dump still answers
/// pd and cm_id.
pub const KINDS: [Kind; 3] = [CTX, PD, CM_ID];

/// A dump request: the device list (`dev` None) or one kind on one device.
pub fn encode_dump(seq: u32, cmd: u16, dev: Option<u32>) -> Vec<u8> {
    let len = NLMSG_HDRLEN + if dev.is_some() { NLA_HDRLEN + 4 } else { 0 };
    let mut m = header(len, msg_type(cmd), NLM_F_REQUEST | NLM_F_DUMP, seq);
    if let Some(index) = dev {
        m.extend_from_slice(&((NLA_HDRLEN + 4) as u16).to_ne_bytes());
        m.extend_from_slice(&RDMA_NLDEV_ATTR_DEV_INDEX.to_ne_bytes());
        m.extend_from_slice(&index.to_ne_bytes());
    }
    m
}

/// Where a dump stands after one datagram of its answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// More datagrams follow.
    More,
    /// NLMSG_DONE with no error: the dump is complete.
    Done,
}

/// Adds the payloads of `cmd`'s answer in one datagram to `into`; the dump ends
/// at NLMSG_DONE (its payload an errno when the dump failed midway) or at an
/// NLMSG_ERROR (the request refused before the dump began).
pub fn collect(
    buf: &[u8],
    cmd: u16,
    seq: u32,
    into: &mut Vec<Vec<u8>>,
) -> Result<Step, NetlinkError> {
    for (ty, flags, s, payload) in super::messages(buf)? {
        if s != seq {
            continue;
        }
        match ty {
            NLMSG_DONE => {
                let error = u32_at(payload, 0).map_or(0, |e| e as i32);
                if error == i32::MIN {
                    // Its negation overflows: no errno the kernel would send.
                    return Err(NetlinkError::Malformed(format!(
                        "dump ended with error code {error}, not a negative errno"
                    )));
                }
                if error < 0 {
                    return Err(kernel_error(-error, None));
                }
                return Ok(Step::Done);
            }
            NLMSG_ERROR => match decode_error(s, flags, payload)? {
                Reply::Error { errno, message, .. } => return Err(kernel_error(errno, message)),
                _ => return Ok(Step::Done),
            },
            t if t == msg_type(cmd) => into.push(payload.to_vec()),
            _ => {}
        }
    }
    Ok(Step::More)
}

/// `(index, name)` of a device in a `RDMA_NLDEV_CMD_GET` answer.
pub fn parse_device(payload: &[u8]) -> Result<Option<(u32, String)>, NetlinkError> {
    let mut index = None;
    let mut name = None;
    for (t, v) in attributes(payload)? {
        match t {
            RDMA_NLDEV_ATTR_DEV_INDEX => index = u32_at(v, 0),
            RDMA_NLDEV_ATTR_DEV_NAME => {
                name = Some(String::from_utf8_lossy(v).trim_end_matches('\0').to_owned())
            }
            _ => {}
        }
    }
    Ok(index.zip(name))
}

/// The PIDs owning the entries of one kind's answer (kernel-owned entries and
/// those of a task already gone, which carry no PID, are left out).
pub fn parse_pids(payload: &[u8], kind: Kind) -> Result<Vec<u32>, NetlinkError> {
    let mut pids = Vec::new();
    for (t, table) in attributes(payload)? {
        if t != kind.table {
            continue;
        }
        for (e, entry) in attributes(table)? {
            if e != kind.entry {
                continue;
            }
            pids.extend(
                attributes(entry)?
                    .into_iter()
                    .find(|(a, _)| *a == RDMA_NLDEV_ATTR_RES_PID)
                    .and_then(|(_, v)| u32_at(v, 0)),
            );
        }
    }
    Ok(pids)
}

/// What the kernel said about RDMA resource owners.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holders {
    /// PID → what it holds, as `<device> <kind>` (`rxe0 pd`).
    pub pids: BTreeMap<u32, BTreeSet<String>>,
    /// The devices dumped.
    pub devices: Vec<String>,
    /// Kinds a device would not dump, with the kernel's answer.
    pub missing: Vec<String>,
}

impl Holders {
    pub fn add(&mut self, pid: u32, device: &str, kind: Kind) {
        self.pids
            .entry(pid)
            .or_default()
            .insert(format!("{device} {}", kind.name));
    }
}

/// Why the kernel could not be asked.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Unavailable {
    #[error("not asked: the agent reads a tree under --root, not the running kernel")]
    NotLive,
    #[error(
        "no RDMA device in /sys/class/infiniband (ib_core not loaded, or no device in the agent's network namespace)"
    )]
    NoDevices,
    #[error("the kernel dumped no RDMA device over netlink")]
    NoNetlinkDevices,
    #[error("{device}: the kernel answered none of the resource dumps ({why})")]
    NoDump { device: String, why: String },
    #[error(
        "the kernel tracks more than {limit} RDMA {what}; the agent reads no more of its answer than that"
    )]
    TooMany { limit: usize, what: &'static str },
    #[error("{0}")]
    Netlink(#[from] NetlinkError),
}

/// Folds one datagram of `kind`'s answer on `device` into `h` as it arrives,
/// never holding more than that datagram; `entries` counts the owned entries
/// read so far (across the whole ask), and more than `max` ends it.
pub fn fold_datagram(
    buf: &[u8],
    kind: Kind,
    seq: u32,
    device: &str,
    h: &mut Holders,
    entries: &mut usize,
    max: usize,
) -> Result<Step, Unavailable> {
    let mut got = Vec::new();
    let step = collect(buf, kind.cmd, seq, &mut got)?;
    for p in got {
        let pids = parse_pids(&p, kind)?;
        *entries += pids.len();
        if *entries > max {
            return Err(Unavailable::TooMany {
                limit: max,
                what: "resources",
            });
        }
        for pid in pids {
            h.add(pid, device, kind);
        }
    }
    Ok(step)
}

/// What reads a dump's answer a datagram at a time (with the request's sequence number).
pub type Datagrams<'a> = dyn FnMut(&[u8], u32) -> Result<Step, Unavailable> + 'a;

impl Socket {
    /// A dump request; `each` gets every datagram of its answer (with the
    /// request's sequence number) until it says the dump is done.
    pub fn stream(
        &mut self,
        cmd: u16,
        dev: Option<u32>,
        each: &mut Datagrams<'_>,
    ) -> Result<(), Unavailable> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        sendto(
            self.fd.as_raw_fd(),
            &encode_dump(seq, cmd, dev),
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(NetlinkError::Io)?;
        // Dump messages are sized to the reader's buffer, up to 32 KiB.
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_TRUNC) {
                Ok(n) => n,
                Err(Errno::EAGAIN) => return Err(NetlinkError::Timeout.into()),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(NetlinkError::Io(e).into()),
            };
            if n > buf.len() {
                return Err(NetlinkError::Malformed(format!(
                    "a datagram of {n} bytes overran the {}-byte buffer",
                    buf.len()
                ))
                .into());
            }
            if each(&buf[..n], seq)? == Step::Done {
                return Ok(());
            }
        }
    }

    /// The devices (`RDMA_NLDEV_CMD_GET`), at most [`MAX_DEVICES`].
    pub fn devices(&mut self) -> Result<Vec<(u32, String)>, Unavailable> {
        let mut devices = Vec::new();
        self.stream(RDMA_NLDEV_CMD_GET, None, &mut |buf, seq| {
            let mut got = Vec::new();
            let step = collect(buf, RDMA_NLDEV_CMD_GET, seq, &mut got)?;
            for p in got {
                devices.extend(parse_device(&p)?);
            }
            if devices.len() > MAX_DEVICES {
                return Err(Unavailable::TooMany {
                    limit: MAX_DEVICES,
                    what: "devices",
                });
            }
            Ok(step)
        })?;
        Ok(devices)
    }
}

/// Asks an open socket: every device, then each kind on each device, each
/// answer folded as its datagrams arrive. A kind
/// the kernel refuses (EOPNOTSUPP, or EINVAL from a kernel without it) is noted;
/// a device on which no kind answers makes the whole answer unusable.
pub fn ask(socket: &mut Socket) -> Result<Holders, Unavailable> {
    let devices = socket.devices()?;
    if devices.is_empty() {
        return Err(Unavailable::NoNetlinkDevices);
    }
    let mut h = Holders::default();
    let mut entries = 0;
    for (index, name) in devices {
        let mut answered = 0;
        let mut why = Vec::new();
        for kind in KINDS {
            let folded = socket.stream(kind.cmd, Some(index), &mut |buf, seq| {
                fold_datagram(buf, kind, seq, &name, &mut h, &mut entries, MAX_ENTRIES)
            });
            match folded {
                Ok(()) => answered += 1,
                Err(Unavailable::Netlink(
                    e @ (NetlinkError::NotSupported(_) | NetlinkError::Invalid(_)),
                )) => {
                    why.push(format!("{}: {e}", kind.name));
                }
                Err(e) => return Err(e),
            }
        }
        if answered == 0 {
            return Err(Unavailable::NoDump {
                device: name,
                why: why.join("; "),
            });
        }
        h.missing
            .extend(why.into_iter().map(|w| format!("{name} {w}")));
        h.devices.push(name);
    }
    Ok(h)
}

/// The running kernel's answer (dumps only read). Opening a NETLINK_RDMA
/// socket can load ib_core, so it is opened only when sysfs already lists an
/// RDMA device (`listed`, from the cycle's listing of the class).
pub fn live(host: &ReadHost, listed: bool) -> Result<Holders, Unavailable> {
    if !host.is_live() {
        return Err(Unavailable::NotLive);
    }
    if !listed {
        return Err(Unavailable::NoDevices);
    }
    ask(&mut Socket::open()?)
}

#[cfg(test)]
#[path = "restrack_tests.rs"]
mod tests;
