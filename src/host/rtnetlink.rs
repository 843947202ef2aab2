//! rtnetlink link events (NETLINK_ROUTE, multicast group RTMGRP_LINK): which
//! network devices went down, so that the daemon counts a link that goes down
//! and up between two reconciles (Soft-RoCE ports have no `link_downed`
//! counter to tell). A device is up when the kernel says IFF_UP and
//! IFF_RUNNING (RFC 2863 operational state up); a flap is up → not up. A
//! deleted device (RTM_DELLINK) is gone, not down: a pod's veth torn down is no flap.
//!
//! Message layout from include/uapi/linux/netlink.h and rtnetlink.h:
//! `nlmsghdr` (16 bytes), `ifinfomsg` (16 bytes), then `rtattr`s aligned to 4.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;

const RTMGRP_LINK: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const IFLA_IFNAME: u16 = 3;
const IFF_UP: u32 = 0x1;
const IFF_RUNNING: u32 = 0x40;
const HDR: usize = 16;
const IFINFO: usize = 16;

/// One RTM_NEWLINK / RTM_DELLINK as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: i32,
    pub name: Option<String>,
    /// IFF_UP and IFF_RUNNING.
    pub up: bool,
    /// RTM_DELLINK: the device is gone.
    pub deleted: bool,
}

/// What one link message changed, by netdev name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It was up and is not (a flap, when it comes back).
    Down(String),
    /// It was deleted: its state and any count of it can go.
    Gone(String),
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The link messages in one datagram; anything else (DONE, errors, other
/// types) and anything truncated is skipped.
pub fn decode(buf: &[u8]) -> Vec<Link> {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(kind)) = (u32_at(buf, at), u16_at(buf, at + 4)) {
        let len = len as usize;
        if len < HDR || at + len > buf.len() {
            break;
        }
        let msg = &buf[at..at + len];
        if (kind == RTM_NEWLINK || kind == RTM_DELLINK) && len >= HDR + IFINFO {
            let index = u32_at(msg, HDR + 4).unwrap_or(0) as i32;
            let flags = u32_at(msg, HDR + 8).unwrap_or(0);
            let mut name = None;
            let mut a = HDR + IFINFO;
            while let (Some(alen), Some(atype)) = (u16_at(msg, a), u16_at(msg, a + 2)) {
                let alen = alen as usize;
                if alen < 4 || a + alen > msg.len() {
                    break;
                }
                if atype == IFLA_IFNAME {
                    let raw = &msg[a + 4..a + alen];
                    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
                    name = std::str::from_utf8(&raw[..end]).ok().map(str::to_owned);
                }
                a += align4(alen);
            }
            out.push(Link {
                index,
                name,
                up: kind == RTM_NEWLINK && flags & IFF_UP != 0 && flags & IFF_RUNNING != 0,
                deleted: kind == RTM_DELLINK,
            });
        }
        at += align4(len);
    }
    out
}

/// Folds decoded links into the known states (ifindex → name, up): the devices
/// that went down, and those deleted (forgotten, so `seen` holds only live devices).
pub fn fold_links(seen: &mut HashMap<i32, (String, bool)>, links: Vec<Link>) -> Vec<Change> {
    let mut out = Vec::new();
    for l in links {
        let name = l
            .name
            .or_else(|| seen.get(&l.index).map(|(n, _)| n.clone()));
        let Some(name) = name else { continue };
        if l.deleted {
            seen.remove(&l.index);
            out.push(Change::Gone(name));
            continue;
        }
        if let Some((_, true)) = seen.get(&l.index) {
            if !l.up {
                out.push(Change::Down(name.clone()));
            }
        }
        seen.insert(l.index, (name, l.up));
    }
    out
}

/// A dump request of every link (`ip link show`), answered on the same socket.
fn dump_request(seq: u32) -> Vec<u8> {
    let len = (HDR + IFINFO) as u32;
    let mut m = Vec::with_capacity(len as usize);
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[0u8; IFINFO]);
    m
}

/// Link states as the kernel announces them; the first state of each device
/// (from the dump at open) is its baseline.
pub struct LinkEvents {
    fd: OwnedFd,
    /// ifindex → (name, up).
    seen: HashMap<i32, (String, bool)>,
}

impl LinkEvents {
    pub fn open() -> Result<LinkEvents, Errno> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, RTMGRP_LINK))?;
        sendto(
            fd.as_raw_fd(),
            &dump_request(1),
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )?;
        Ok(LinkEvents {
            fd,
            seen: HashMap::new(),
        })
    }

    /// Waits for the next datagram, at most `timeout` (none: for ever); returns
    /// what it changed (nothing when the wait timed out).
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Vec<Change>, Errno> {
        // Zero would mean "for ever" to SO_RCVTIMEO.
        let t = timeout.map_or(TimeVal::new(0, 0), |t| {
            let t = t.max(Duration::from_millis(1));
            TimeVal::new(t.as_secs() as i64, i64::from(t.subsec_micros()))
        });
        setsockopt(&self.fd, sockopt::ReceiveTimeout, &t)?;
        let mut buf = vec![0u8; 65536];
        let n = loop {
            match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Ok(n) => break n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) if timeout.is_some() => return Ok(Vec::new()),
                // The socket's buffer overflowed: states were lost, not a flap.
                Err(Errno::ENOBUFS) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            }
        };
        Ok(self.fold(decode(&buf[..n])))
    }

    /// Folds decoded links into the known states (see [`fold_links`]).
    pub fn fold(&mut self, links: Vec<Link>) -> Vec<Change> {
        fold_links(&mut self.seen, links)
    }

    /// How many devices are known (every live one, none deleted).
    pub fn known(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RTM_NEWLINK as the kernel lays it out (hand-built from the uapi
    /// headers' layout): header, ifinfomsg, IFLA_IFNAME, and a 4-byte IFLA_MTU.
    fn newlink(index: i32, name: &str, flags: u32) -> Vec<u8> {
        let mut attrs = Vec::new();
        let nlen = 4 + name.len() + 1;
        attrs.extend_from_slice(&(nlen as u16).to_ne_bytes());
        attrs.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
        attrs.extend_from_slice(name.as_bytes());
        attrs.push(0);
        attrs.resize(align4(attrs.len()), 0);
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&4u16.to_ne_bytes());
        attrs.extend_from_slice(&1500u32.to_ne_bytes());
        let len = HDR + IFINFO + attrs.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&[0u8; 8]);
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(&index.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&attrs);
        m
    }

    #[test]
    fn decodes_names_and_state() {
        let mut buf = newlink(3, "veth0", IFF_UP | IFF_RUNNING | 0x10000);
        buf.extend(newlink(4, "veth1", IFF_UP));
        let links = decode(&buf);
        assert_eq!(
            links,
            [
                Link {
                    index: 3,
                    name: Some("veth0".into()),
                    up: true,
                    deleted: false
                },
                Link {
                    index: 4,
                    name: Some("veth1".into()),
                    up: false,
                    deleted: false
                }
            ]
        );
        // Truncated: nothing, no panic.
        assert!(decode(&buf[..20]).is_empty());
    }

    /// The real kernel, in a network namespace of this test's own (root): a
    /// veth pair whose one end is brought up and down twice is two downs of
    /// each end (the peer loses its carrier), its creation and deletion none.
    #[test]
    #[ignore = "needs root (a network namespace and `ip link`)"]
    fn the_kernel_announces_each_down_of_a_veth_pair() {
        let found = std::thread::spawn(|| {
            // SAFETY: unshare(2) with a flag only; it affects this thread alone.
            let rc = unsafe { nix::libc::unshare(nix::libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "unshare(CLONE_NEWNET) (root?)");
            let ip = |args: &str| {
                let out = std::process::Command::new("ip")
                    .args(args.split(' '))
                    .output()
                    .expect("ip");
                assert!(out.status.success(), "ip {args}");
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            let mut ev = LinkEvents::open().unwrap();
            ip("link add fn0 type veth peer name fn1");
            ip("link set fn1 up");
            for _ in 0..2 {
                ip("link set fn0 up");
                // Carrier comes through the kernel's linkwatch, a moment later.
                let start = std::time::Instant::now();
                while !ip("-o link show fn0").contains("state UP") {
                    assert!(start.elapsed().as_secs() < 5, "fn0 never UP");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                ip("link set fn0 down");
            }
            ip("link del fn0");
            std::thread::sleep(std::time::Duration::from_millis(200));
            let mut downs = Vec::new();
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = recv(ev.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                downs.extend(ev.fold(decode(&buf[..n])));
            }
            // The deleted pair is forgotten: only `lo` is left.
            (downs, ev.known())
        })
        .join()
        .unwrap();
        let (found, known) = found;
        let count = |c: Change| found.iter().filter(|d| **d == c).count();
        let down = |n: &str| count(Change::Down(n.into()));
        let gone = |n: &str| count(Change::Gone(n.into()));
        assert_eq!((down("fn0"), down("fn1")), (2, 2), "{found:?}");
        assert_eq!((gone("fn0"), gone("fn1")), (1, 1), "{found:?}");
        assert_eq!(known, 1, "{found:?}");
    }

    #[test]
    fn a_flap_is_up_to_down_and_the_first_state_is_a_baseline() {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let mut ev = LinkEvents {
            fd,
            seen: HashMap::new(),
        };
        let l = |up| Link {
            index: 3,
            name: Some("veth0".into()),
            up,
            deleted: false,
        };
        let down = || Change::Down("veth0".into());
        // First seen down: a baseline, no flap.
        assert!(ev.fold(vec![l(false)]).is_empty());
        assert!(ev.fold(vec![l(true)]).is_empty());
        // Repeated messages of one state count once.
        assert_eq!(ev.fold(vec![l(false), l(false)]), [down()]);
        assert_eq!(ev.fold(vec![l(true), l(false)]), [down()]);
        // Deleted while up (RTM_DELLINK, named by index only): gone, not down,
        // and forgotten.
        assert!(ev.fold(vec![l(true)]).is_empty());
        let del = Link {
            name: None,
            up: false,
            deleted: true,
            ..l(false)
        };
        assert_eq!(ev.fold(vec![del]), [Change::Gone("veth0".into())]);
        assert_eq!(ev.known(), 0);
    }
}
