//! devlink health reporters over generic netlink, as `devlink health show`
//! reads them: resolve the `devlink` family (CTRL_CMD_GETFAMILY), then dump
//! DEVLINK_CMD_HEALTH_REPORTER_GET and keep, per reporter, its instance
//! (`pci/0000:03:00.0`), port, name, state, error and recover counts and the
//! time of its last dump.
//!
//! Constants are the kernel's uapi (include/uapi/linux/genetlink.h and
//! include/uapi/linux/devlink.h, as Debian's linux-libc-dev 6.1 installs them
//! under /usr/include/linux; tests/devlink_golden.rs compiles C against those
//! headers and compares bytes). The reporter states are not uapi: they are
//! `enum devlink_health_reporter_state` in include/net/devlink.h (torvalds/linux
//! 00cf1fb3805f6eac2b751e0c2f03161a80347d67): HEALTHY 0, ERROR 1.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;

use super::netlink::{
    NLA_HDRLEN, NLM_F_ACK, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NetlinkError,
    Reply, align4, attributes, decode_error, header, messages,
};
use super::read::ReadHost;

/// `GENL_ID_CTRL` (= NLMSG_MIN_TYPE), the controller's fixed message type.
pub const GENL_ID_CTRL: u16 = 16;
pub const CTRL_CMD_GETFAMILY: u8 = 3;
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `DEVLINK_GENL_NAME` and `DEVLINK_GENL_VERSION`.
pub const DEVLINK_GENL_NAME: &str = "devlink";
pub const DEVLINK_GENL_VERSION: u8 = 1;
pub const DEVLINK_CMD_HEALTH_REPORTER_GET: u8 = 52;
pub const DEVLINK_ATTR_BUS_NAME: u16 = 1;
pub const DEVLINK_ATTR_DEV_NAME: u16 = 2;
pub const DEVLINK_ATTR_PORT_INDEX: u16 = 3;
pub const DEVLINK_ATTR_HEALTH_REPORTER: u16 = 114;
pub const DEVLINK_ATTR_HEALTH_REPORTER_NAME: u16 = 115;
pub const DEVLINK_ATTR_HEALTH_REPORTER_STATE: u16 = 116;
pub const DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT: u16 = 117;
pub const DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT: u16 = 118;
/// Wall-clock nanoseconds of the last dump (the older DUMP_TS, 119, is jiffies).
pub const DEVLINK_ATTR_HEALTH_REPORTER_DUMP_TS_NS: u16 = 137;
/// `NLM_F_DUMP` (NLM_F_ROOT | NLM_F_MATCH).
pub const NLM_F_DUMP: u16 = 0x300;
const GENL_HDRLEN: usize = 4;
/// More reporters than any node has (mlx5: a handful per function, 8 NICs × VFs).
pub const MAX_REPORTERS: usize = 4096;

/// One health reporter as the kernel dumped it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reporter {
    /// `pci/0000:03:00.0`, `netdevsim/netdevsim10`.
    pub instance: String,
    /// The devlink port, for per-port reporters (newer kernels' mlx5 tx/rx).
    pub port: Option<u32>,
    pub name: String,
    /// The raw state: 0 healthy, 1 error, anything else unknown to us.
    pub state: u8,
    pub errors: u64,
    pub recovers: u64,
    /// Unix seconds of the last dump, when the reporter has one.
    pub last_dump_unix: Option<u64>,
}

impl Reporter {
    pub fn state_name(&self) -> &'static str {
        match self.state {
            0 => "healthy",
            1 => "error",
            _ => "unknown",
        }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum DevlinkError {
    #[error("not asked: the agent reads a tree under --root, not the running kernel")]
    NotLive,
    #[error(
        "the kernel has no devlink generic-netlink family (built without CONFIG_NET_DEVLINK, or too old for health reporters)"
    )]
    NoFamily,
    #[error("the kernel's devlink answer lists more than {MAX_REPORTERS} health reporters")]
    TooMany,
    #[error("generic netlink socket: {0}")]
    Io(Errno),
    #[error("no answer from the kernel on the generic netlink socket within 5 seconds")]
    Timeout,
    #[error("the kernel answered {errno}{}", .message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kernel {
        errno: Errno,
        message: Option<String>,
    },
    #[error("malformed devlink answer: {0}")]
    Netlink(#[from] NetlinkError),
}

fn genl(len: usize, ty: u16, flags: u16, seq: u32, cmd: u8, version: u8) -> Vec<u8> {
    let mut m = header(len, ty, flags, seq);
    m.extend_from_slice(&[cmd, version, 0, 0]);
    m
}

/// CTRL_CMD_GETFAMILY for `devlink`: the family's id is assigned at boot.
pub fn encode_get_family(seq: u32) -> Vec<u8> {
    let name = format!("{DEVLINK_GENL_NAME}\0");
    let attr_len = NLA_HDRLEN + name.len();
    let len = NLMSG_HDRLEN + GENL_HDRLEN + align4(attr_len);
    let mut m = genl(
        len,
        GENL_ID_CTRL,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        CTRL_CMD_GETFAMILY,
        1,
    );
    m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    m.extend_from_slice(&CTRL_ATTR_FAMILY_NAME.to_ne_bytes());
    m.extend_from_slice(name.as_bytes());
    m.resize(len, 0);
    m
}

/// DEVLINK_CMD_HEALTH_REPORTER_GET as a dump of every instance's reporters.
pub fn encode_reporter_dump(family: u16, seq: u32) -> Vec<u8> {
    genl(
        NLMSG_HDRLEN + GENL_HDRLEN,
        family,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        DEVLINK_CMD_HEALTH_REPORTER_GET,
        DEVLINK_GENL_VERSION,
    )
}

/// What one datagram said to a request with sequence number `seq`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub family: Option<u16>,
    pub reporters: Vec<Reporter>,
    /// The kernel ended the answer: an ACK, NLMSG_DONE, or an error (`Err`:
    /// the errno, positive, and the extended-ack text).
    pub end: Option<Result<(), (i32, Option<String>)>>,
}

/// Decodes a datagram: family replies, reporter messages, the end marker.
pub fn decode(buf: &[u8], seq: u32, family: Option<u16>) -> Result<Answer, NetlinkError> {
    let mut a = Answer::default();
    for (ty, flags, s, payload) in messages(buf)? {
        if s != seq {
            continue;
        }
        match ty {
            NLMSG_ERROR => match decode_error(s, flags, payload)? {
                Reply::Error { errno, message, .. } => {
                    a.end = Some(Err((errno, message)));
                }
                _ => a.end = Some(Ok(())),
            },
            NLMSG_DONE => a.end = Some(Ok(())),
            GENL_ID_CTRL => {
                let attrs = attributes(payload.get(GENL_HDRLEN..).unwrap_or_default())?;
                a.family = attrs
                    .iter()
                    .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
                    .and_then(|(_, v)| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)));
            }
            t if Some(t) == family && payload.first() == Some(&DEVLINK_CMD_HEALTH_REPORTER_GET) => {
                a.reporters
                    .push(reporter(payload.get(GENL_HDRLEN..).unwrap_or_default())?);
            }
            _ => {}
        }
    }
    Ok(a)
}

fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).trim_end_matches('\0').to_owned()
}

fn number(v: &[u8]) -> Option<u64> {
    match v.len() {
        1 => Some(u64::from(v[0])),
        4 => Some(u64::from(u32::from_ne_bytes(v.try_into().ok()?))),
        8 => Some(u64::from_ne_bytes(v.try_into().ok()?)),
        _ => None,
    }
}

fn malformed(what: &str) -> NetlinkError {
    NetlinkError::Malformed(format!("health reporter message without {what}"))
}

/// One DEVLINK_CMD_HEALTH_REPORTER_GET message's attributes.
fn reporter(b: &[u8]) -> Result<Reporter, NetlinkError> {
    let attrs = attributes(b)?;
    let find = |ty: u16| attrs.iter().find(|(t, _)| *t == ty).map(|(_, v)| *v);
    let bus = find(DEVLINK_ATTR_BUS_NAME)
        .map(text)
        .ok_or_else(|| malformed("a bus name"))?;
    let dev = find(DEVLINK_ATTR_DEV_NAME)
        .map(text)
        .ok_or_else(|| malformed("a device name"))?;
    let port = find(DEVLINK_ATTR_PORT_INDEX)
        .and_then(number)
        .map(|p| p as u32);
    let nest = find(DEVLINK_ATTR_HEALTH_REPORTER).ok_or_else(|| malformed("the reporter nest"))?;
    let inner = attributes(nest)?;
    let get = |ty: u16| inner.iter().find(|(t, _)| *t == ty).map(|(_, v)| *v);
    let count = |ty: u16, what: &str| get(ty).and_then(number).ok_or_else(|| malformed(what));
    Ok(Reporter {
        instance: format!("{bus}/{dev}"),
        port,
        name: get(DEVLINK_ATTR_HEALTH_REPORTER_NAME)
            .map(text)
            .ok_or_else(|| malformed("a reporter name"))?,
        state: count(DEVLINK_ATTR_HEALTH_REPORTER_STATE, "a state")? as u8,
        errors: count(DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT, "an error count")?,
        recovers: count(
            DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT,
            "a recover count",
        )?,
        last_dump_unix: get(DEVLINK_ATTR_HEALTH_REPORTER_DUMP_TS_NS)
            .and_then(number)
            .map(|ns| ns / 1_000_000_000),
    })
}

/// A NETLINK_GENERIC socket with a receive timeout.
struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    fn open() -> Result<Socket, DevlinkError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkGeneric,
        )
        .map_err(DevlinkError::Io)?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(DevlinkError::Io)?;
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(5, 0)).map_err(DevlinkError::Io)?;
        Ok(Socket { fd, seq: 0 })
    }

    /// Sends one request and folds the answers up to its end marker.
    fn ask(&mut self, msg: Vec<u8>, family: Option<u16>) -> Result<Answer, DevlinkError> {
        sendto(
            self.fd.as_raw_fd(),
            &msg,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(DevlinkError::Io)?;
        let mut all = Answer::default();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Ok(n) => n,
                Err(Errno::EAGAIN) => return Err(DevlinkError::Timeout),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(DevlinkError::Io(e)),
            };
            let a = decode(&buf[..n], self.seq, family)?;
            all.family = all.family.or(a.family);
            all.reporters.extend(a.reporters);
            if all.reporters.len() > MAX_REPORTERS {
                return Err(DevlinkError::TooMany);
            }
            match a.end {
                Some(Ok(())) => return Ok(all),
                Some(Err((errno, message))) => {
                    let errno = Errno::from_raw(errno);
                    return Err(DevlinkError::Kernel { errno, message });
                }
                None => {}
            }
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }
}

/// Every devlink health reporter of the running kernel.
pub fn live(host: &ReadHost) -> Result<Vec<Reporter>, DevlinkError> {
    if !host.is_live() {
        return Err(DevlinkError::NotLive);
    }
    let mut s = Socket::open()?;
    let seq = s.next_seq();
    let family = match s.ask(encode_get_family(seq), None) {
        Ok(a) => a.family.ok_or(DevlinkError::NoFamily)?,
        // The controller answers ENOENT for a family the kernel does not have.
        Err(DevlinkError::Kernel {
            errno: Errno::ENOENT,
            ..
        }) => return Err(DevlinkError::NoFamily),
        Err(e) => return Err(e),
    };
    let seq = s.next_seq();
    Ok(s.ask(encode_reporter_dump(family, seq), Some(family))?
        .reporters)
}

#[cfg(test)]
#[path = "devlink_tests.rs"]
mod tests;
