//! RDMA netlink (NETLINK_RDMA, the NLDEV client): just enough to read and set the
//! RDMA subsystem's network-namespace mode, as `rdma system set netns` does.
//!
//! Messages are hand-encoded (no crate speaks NLDEV); the encoder and decoder are
//! pure and tested byte-exact against messages built by C from the kernel's uapi
//! headers. The live socket sits behind [`RdmaNetlink`] so the error paths can be
//! tested with a fake: no test machine here has RDMA.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;

pub mod restrack;

/// `NETLINK_RDMA` in linux/netlink.h.
pub const NETLINK_RDMA: i32 = 20;
/// `RDMA_NL_NLDEV`: the client number in the high bits of the message type.
pub const RDMA_NL_NLDEV: u16 = 5;
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;
/// A u8: 0 exclusive, 1 shared.
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Attribute types carry two flag bits (nested, net byte order) above the type.
const NLA_TYPE_MASK: u16 = 0x3fff;
pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NLA_HDRLEN: usize = 4;

/// The kernel's netns mode of the RDMA subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetnsMode {
    /// Each RDMA device belongs to one network namespace.
    Exclusive,
    /// Every device is visible in every namespace (the kernel default).
    Shared,
}

impl NetnsMode {
    /// The u8 of the netlink attribute and of `options ib_core netns_mode=`.
    pub fn wire(self) -> u8 {
        match self {
            NetnsMode::Exclusive => 0,
            NetnsMode::Shared => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NetnsMode::Exclusive => "exclusive",
            NetnsMode::Shared => "shared",
        }
    }
}

impl std::fmt::Display for NetnsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum NetlinkError {
    #[error(
        "RDMA netlink is not available: the kernel has no RDMA core loaded (ib_core), or no RDMA support at all ({0})"
    )]
    Unavailable(Errno),
    #[error(
        "the kernel refused to switch the RDMA netns mode because other network namespaces exist (EBUSY){}",
        extack(.0)
    )]
    Busy(Option<String>),
    #[error(
        "not permitted (EPERM): setting the RDMA netns mode needs CAP_NET_ADMIN in the initial user and network namespace{}",
        extack(.0)
    )]
    Permission(Option<String>),
    #[error(
        "the kernel rejected the request as invalid (EINVAL): it does not know the netns-mode attribute (kernel older than 5.3 without MLNX_OFED 4.7?){}",
        extack(.0)
    )]
    Invalid(Option<String>),
    #[error(
        "the kernel does not support changing the RDMA netns mode (EOPNOTSUPP){}",
        extack(.0)
    )]
    NotSupported(Option<String>),
    #[error("the kernel answered {errno}{}", extack(.message))]
    Kernel {
        errno: Errno,
        message: Option<String>,
    },
    #[error("RDMA netlink socket: {0}")]
    Io(Errno),
    #[error("no answer from the kernel on the RDMA netlink socket within 5 seconds")]
    Timeout,
    #[error("malformed RDMA netlink reply: {0}")]
    Malformed(String),
}

fn extack(m: &Option<String>) -> String {
    m.as_ref().map(|m| format!(": {m}")).unwrap_or_default()
}

/// Maps a kernel error (a positive errno from an NLMSG_ERROR) to a clear error.
pub fn kernel_error(errno: i32, message: Option<String>) -> NetlinkError {
    match Errno::from_raw(errno) {
        Errno::EBUSY => NetlinkError::Busy(message),
        Errno::EPERM | Errno::EACCES => NetlinkError::Permission(message),
        Errno::EINVAL => NetlinkError::Invalid(message),
        Errno::EOPNOTSUPP => NetlinkError::NotSupported(message),
        errno => NetlinkError::Kernel { errno, message },
    }
}

/// `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)`.
pub fn msg_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) | op
}

pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

pub(crate) fn header(len: usize, ty: u16, flags: u16, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    // Port id 0: the kernel fills in ours.
    m.extend_from_slice(&0u32.to_ne_bytes());
    m
}

/// SYS_GET: no attributes; the kernel answers with the system attributes, then an ACK.
pub fn encode_sys_get(seq: u32) -> Vec<u8> {
    header(
        NLMSG_HDRLEN,
        msg_type(RDMA_NLDEV_CMD_SYS_GET),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
    )
}

/// SYS_SET with the netns-mode attribute only: kernels reject a SET that also
/// carries COPY_ON_FORK, so it is never sent.
pub fn encode_sys_set(seq: u32, mode: NetnsMode) -> Vec<u8> {
    let attr_len = NLA_HDRLEN + 1;
    let len = NLMSG_HDRLEN + align4(attr_len);
    let mut m = header(
        len,
        msg_type(RDMA_NLDEV_CMD_SYS_SET),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
    );
    m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    m.extend_from_slice(&RDMA_NLDEV_SYS_ATTR_NETNS_MODE.to_ne_bytes());
    m.push(mode.wire());
    m.resize(len, 0);
    m
}

/// One message the kernel sent back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// NLMSG_ERROR with error 0.
    Ack { seq: u32 },
    /// NLMSG_ERROR with a negative errno (stored positive) and the extended-ack text.
    Error {
        seq: u32,
        errno: i32,
        message: Option<String>,
    },
    /// The answer to SYS_GET.
    System { seq: u32, netns_mode: Option<u8> },
    /// Anything else (NLMSG_DONE, other types): ignored by the caller.
    Other { seq: u32 },
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `(type without flag bits, payload)` of each attribute in `b`.
pub(crate) fn attributes(b: &[u8]) -> Result<Vec<(u16, &[u8])>, NetlinkError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLA_HDRLEN <= b.len() {
        let len = u16_at(b, at).unwrap_or(0) as usize;
        let ty = u16_at(b, at + 2).unwrap_or(0) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || at + len > b.len() {
            return Err(NetlinkError::Malformed(format!(
                "attribute of length {len} at offset {at} overruns {} bytes",
                b.len()
            )));
        }
        out.push((ty, &b[at + NLA_HDRLEN..at + len]));
        at += align4(len);
    }
    Ok(out)
}

/// One netlink message of a datagram: type, flags, sequence number, payload.
pub(crate) type Message<'a> = (u16, u16, u32, &'a [u8]);

pub(crate) fn messages(buf: &[u8]) -> Result<Vec<Message<'_>>, NetlinkError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32_at(buf, at).unwrap_or(0) as usize;
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return Err(NetlinkError::Malformed(format!(
                "message of length {len} at offset {at} in a datagram of {} bytes",
                buf.len()
            )));
        }
        let ty = u16_at(buf, at + 4).unwrap_or(0);
        let flags = u16_at(buf, at + 6).unwrap_or(0);
        let seq = u32_at(buf, at + 8).unwrap_or(0);
        out.push((ty, flags, seq, &buf[at + NLMSG_HDRLEN..at + len]));
        at += align4(len);
    }
    Ok(out)
}

/// Splits a datagram into the messages it holds.
pub fn decode(buf: &[u8]) -> Result<Vec<Reply>, NetlinkError> {
    messages(buf)?
        .into_iter()
        .map(|(ty, flags, seq, payload)| {
            Ok(match ty {
                NLMSG_ERROR => decode_error(seq, flags, payload)?,
                NLMSG_DONE => Reply::Other { seq },
                t if t == msg_type(RDMA_NLDEV_CMD_SYS_GET) => {
                    let netns_mode = attributes(payload)?
                        .into_iter()
                        .find(|(t, _)| *t == RDMA_NLDEV_SYS_ATTR_NETNS_MODE)
                        .and_then(|(_, v)| v.first().copied());
                    Reply::System { seq, netns_mode }
                }
                _ => Reply::Other { seq },
            })
        })
        .collect()
}

/// struct nlmsgerr: the error, the request's header (and body unless capped),
/// then extended-ack attributes when the kernel sent them.
pub(crate) fn decode_error(seq: u32, flags: u16, p: &[u8]) -> Result<Reply, NetlinkError> {
    let error = u32_at(p, 0)
        .ok_or_else(|| NetlinkError::Malformed("truncated error message".into()))?
        as i32;
    if error == 0 {
        return Ok(Reply::Ack { seq });
    }
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        let request_len = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            u32_at(p, 4).unwrap_or(0) as usize
        };
        if let Some(tlvs) = p.get(align4(4 + request_len)..) {
            message = attributes(tlvs)?
                .into_iter()
                .find(|(t, _)| *t == NLMSGERR_ATTR_MSG)
                .map(|(_, v)| String::from_utf8_lossy(v).trim_end_matches('\0').to_owned());
        }
    }
    // The kernel sends a negative errno; anything else (i32::MIN included, whose
    // negation overflows) is not an error report we can trust.
    let errno = error.checked_neg().filter(|e| *e > 0).ok_or_else(|| {
        NetlinkError::Malformed(format!("error code {error} is not a negative errno"))
    })?;
    Ok(Reply::Error {
        seq,
        errno,
        message,
    })
}

/// The live operations, narrow so tests can stand in for the kernel.
pub trait RdmaNetlink {
    fn get_netns_mode(&mut self) -> Result<NetnsMode, NetlinkError>;
    fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), NetlinkError>;
}

/// A NETLINK_RDMA socket. Opening it can auto-load ib_core, so read-only checks
/// use sysfs instead and only `apply` opens one.
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    pub fn open() -> Result<Socket, NetlinkError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRDMA,
        )
        .map_err(|e| match e {
            Errno::EPROTONOSUPPORT | Errno::EAFNOSUPPORT => NetlinkError::Unavailable(e),
            e => NetlinkError::Io(e),
        })?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(NetlinkError::Io)?;
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(5, 0)).map_err(NetlinkError::Io)?;
        Ok(Socket { fd, seq: 0 })
    }

    /// Sends one request and gathers the replies to it up to its ACK or error.
    fn transact(&mut self, msg: impl FnOnce(u32) -> Vec<u8>) -> Result<Vec<Reply>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        sendto(
            self.fd.as_raw_fd(),
            &msg(seq),
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(NetlinkError::Io)?;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 16384];
        loop {
            let n = match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Ok(n) => n,
                Err(Errno::EAGAIN) => return Err(NetlinkError::Timeout),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(NetlinkError::Io(e)),
            };
            for r in decode(&buf[..n])? {
                match r {
                    Reply::Ack { seq: s } if s == seq => return Ok(got),
                    Reply::Error {
                        seq: s,
                        errno,
                        message,
                    } if s == seq => return Err(kernel_error(errno, message)),
                    r => got.push(r),
                }
            }
        }
    }
}

impl RdmaNetlink for Socket {
    fn get_netns_mode(&mut self) -> Result<NetnsMode, NetlinkError> {
        let replies = self.transact(encode_sys_get)?;
        match replies.iter().find_map(|r| match r {
            Reply::System { netns_mode, .. } => Some(*netns_mode),
            _ => None,
        }) {
            Some(Some(0)) => Ok(NetnsMode::Exclusive),
            Some(Some(1)) => Ok(NetnsMode::Shared),
            Some(Some(v)) => Err(NetlinkError::Malformed(format!("netns mode {v}"))),
            Some(None) => Err(NetlinkError::Malformed(
                "the SYS_GET answer has no netns mode (kernel older than 5.3?)".into(),
            )),
            None => Err(NetlinkError::Malformed("no answer to SYS_GET".into())),
        }
    }

    fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), NetlinkError> {
        self.transact(|seq| encode_sys_set(seq, mode)).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    /// Found by fuzzing: an error code of i32::MIN overflowed when negated.
    #[test]
    fn error_code_that_is_not_a_negative_errno_is_malformed() {
        let crash: &[u8] = &[
            0x16, 0, 0, 0, 0x02, 0, 0xff, 0xff, 0xff, 0xff, 0, 0x10, 0x09, 0, 0, 0, 0, 0, 0, 0x80,
            0, 0, 0, 0, 0xff, 0x0a, 0x04, 0xff, 0xff, 0xff, 0, 0xff,
        ];
        assert!(matches!(
            decode(&crash[..0x16]),
            Err(NetlinkError::Malformed(_))
        ));
    }

    use super::*;

    #[test]
    fn set_is_a_padded_u8_attribute() {
        let m = encode_sys_set(7, NetnsMode::Exclusive);
        assert_eq!(m.len(), 24);
        assert_eq!(u16_at(&m, 4), Some((5 << 10) | 7));
        assert_eq!(&m[16..24], &[5, 0, 66, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn decodes_answer_ack_and_errors() {
        let mut answer = header(24, msg_type(RDMA_NLDEV_CMD_SYS_GET), 0, 3);
        answer.extend_from_slice(&[5, 0, 66, 0, 1, 0, 0, 0]);
        let mut ack = header(36, NLMSG_ERROR, NLM_F_CAPPED, 3);
        ack.extend_from_slice(&0i32.to_ne_bytes());
        ack.extend_from_slice(&encode_sys_get(3));
        let mut both = answer.clone();
        both.extend_from_slice(&ack);
        assert_eq!(
            decode(&both).unwrap(),
            vec![
                Reply::System {
                    seq: 3,
                    netns_mode: Some(1)
                },
                Reply::Ack { seq: 3 }
            ]
        );
        // EBUSY with an extended-ack message after the capped request header.
        let text = b"busy\0";
        let mut err = header(
            20 + 16 + align4(4 + text.len()),
            NLMSG_ERROR,
            NLM_F_CAPPED | NLM_F_ACK_TLVS,
            4,
        );
        err.extend_from_slice(&(-(Errno::EBUSY as i32)).to_ne_bytes());
        err.extend_from_slice(&encode_sys_get(4));
        err.extend_from_slice(&((4 + text.len()) as u16).to_ne_bytes());
        err.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        err.extend_from_slice(text);
        err.resize(err.len().next_multiple_of(4), 0);
        let r = decode(&err).unwrap();
        assert_eq!(
            r,
            vec![Reply::Error {
                seq: 4,
                errno: Errno::EBUSY as i32,
                message: Some("busy".into())
            }]
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(&[0xff; 20]).is_err());
        let mut bad_attr = header(24, msg_type(RDMA_NLDEV_CMD_SYS_GET), 0, 1);
        bad_attr.extend_from_slice(&[200, 0, 66, 0, 1, 0, 0, 0]);
        assert!(decode(&bad_attr).is_err());
        assert_eq!(decode(&[1, 2, 3]).unwrap(), vec![]);
        let mut short_err = header(17, NLMSG_ERROR, 0, 1);
        short_err.push(1);
        assert!(decode(&short_err).is_err());
    }

    #[test]
    fn errors_read_clearly() {
        let busy = kernel_error(Errno::EBUSY as i32, None).to_string();
        assert!(busy.contains("other network namespaces exist"), "{busy}");
        let perm = kernel_error(Errno::EPERM as i32, None).to_string();
        assert!(perm.contains("CAP_NET_ADMIN"), "{perm}");
        let inval = kernel_error(Errno::EINVAL as i32, Some("bad attr".into())).to_string();
        assert!(
            inval.contains("5.3") && inval.ends_with(": bad attr"),
            "{inval}"
        );
        assert!(matches!(
            kernel_error(Errno::EOPNOTSUPP as i32, None),
            NetlinkError::NotSupported(None)
        ));
        assert!(
            kernel_error(Errno::ENODEV as i32, None)
                .to_string()
                .contains("ENODEV")
        );
    }
}
