//! Shapes as nldev.c builds them (fill_nldev_handle, then the kind's table of
//! entries, each with fill_res_name_pid's PID or kernel name); byte-exact
//! checks against the uapi header are in tests/netlink_golden.rs.

use super::*;
use crate::host::netlink::{align4, u16_at};

const NLM_F_MULTI: u16 = 0x2;

fn attr(ty: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((NLA_HDRLEN + value.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(value);
    a.resize(align4(a.len()), 0);
    a
}

fn message(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut m = header(NLMSG_HDRLEN + payload.len(), ty, flags, seq);
    m.extend_from_slice(payload);
    m
}

fn handle(index: u32, name: &str) -> Vec<u8> {
    let mut p = attr(RDMA_NLDEV_ATTR_DEV_INDEX, &index.to_ne_bytes());
    p.extend(attr(
        RDMA_NLDEV_ATTR_DEV_NAME,
        format!("{name}\0").as_bytes(),
    ));
    p
}

/// A dump answer of `kind` on rxe0: one entry per owner, `None` a kernel one.
fn answer(kind: Kind, seq: u32, owners: &[Option<u32>]) -> Vec<u8> {
    let mut table = Vec::new();
    for (n, owner) in owners.iter().enumerate() {
        // The entry's own number (pdn, ctxn, cm_idn) comes first, as nldev fills it.
        let mut entry = attr(60, &(n as u32).to_ne_bytes());
        entry.extend(match owner {
            Some(pid) => attr(RDMA_NLDEV_ATTR_RES_PID, &pid.to_ne_bytes()),
            None => attr(RDMA_NLDEV_ATTR_RES_KERN_NAME, b"ib_core\0"),
        });
        table.extend(attr(kind.entry, &entry));
    }
    let mut payload = handle(3, "rxe0");
    payload.extend(attr(kind.table, &table));
    message(msg_type(kind.cmd), NLM_F_MULTI, seq, &payload)
}

fn done(seq: u32, error: i32) -> Vec<u8> {
    message(NLMSG_DONE, NLM_F_MULTI, seq, &error.to_ne_bytes())
}

#[test]
fn a_dump_request_names_the_device() {
    let m = encode_dump(9, RDMA_NLDEV_CMD_RES_PD_GET, Some(3));
    assert_eq!(m.len(), 24);
    assert_eq!(u16_at(&m, 4), Some((5 << 10) | 14));
    assert_eq!(u16_at(&m, 6), Some(NLM_F_REQUEST | NLM_F_DUMP));
    assert_eq!(&m[16..24], &[8, 0, 1, 0, 3, 0, 0, 0]);
    assert_eq!(encode_dump(1, RDMA_NLDEV_CMD_GET, None).len(), 16);
}

#[test]
fn owners_come_from_the_entries_kernel_ones_left_out() {
    let mut got = Vec::new();
    let mut buf = answer(PD, 7, &[Some(4301), None, Some(4302)]);
    // A message of another request on the socket is not ours.
    buf.extend(answer(PD, 6, &[Some(1)]));
    assert_eq!(collect(&buf, PD.cmd, 7, &mut got).unwrap(), Step::More);
    assert_eq!(
        collect(&done(7, 0), PD.cmd, 7, &mut got).unwrap(),
        Step::Done
    );
    assert_eq!(got.len(), 1);
    assert_eq!(parse_pids(&got[0], PD).unwrap(), vec![4301, 4302]);
    // Another kind's table in the same message is not this kind's.
    assert!(parse_pids(&got[0], CTX).unwrap().is_empty());
    assert_eq!(
        parse_device(&handle(3, "rxe0")).unwrap(),
        Some((3, "rxe0".into()))
    );
}

#[test]
fn errors_end_the_dump_clearly() {
    let mut got = Vec::new();
    // A dump that failed midway: NLMSG_DONE carries the errno.
    let e = collect(&done(2, -(Errno::EOPNOTSUPP as i32)), CTX.cmd, 2, &mut got).unwrap_err();
    assert!(matches!(e, NetlinkError::NotSupported(None)), "{e:?}");
    // i32::MIN has no negation (found by the netlink_decode fuzzer): malformed, no panic.
    let e = collect(&done(2, i32::MIN), CTX.cmd, 2, &mut got).unwrap_err();
    assert!(matches!(e, NetlinkError::Malformed(_)), "{e:?}");
    // Refused before it began (a kernel without the command): NLMSG_ERROR.
    let mut err = (-(Errno::EINVAL as i32)).to_ne_bytes().to_vec();
    err.extend(encode_dump(2, CTX.cmd, Some(3)));
    let e = collect(&message(NLMSG_ERROR, 0, 2, &err), CTX.cmd, 2, &mut got).unwrap_err();
    assert!(matches!(e, NetlinkError::Invalid(None)), "{e:?}");
    // Truncated or overrunning data is malformed, never a panic.
    let bad = answer(PD, 1, &[Some(5)]);
    assert!(collect(&bad[..bad.len() - 2], PD.cmd, 1, &mut got).is_err());
    let mut overrun = bad.clone();
    overrun[NLMSG_HDRLEN] = 200;
    let mut got = Vec::new();
    collect(&overrun, PD.cmd, 1, &mut got).unwrap();
    assert!(parse_pids(&got[0], PD).is_err());
}

#[test]
fn holders_merge_kinds_per_process() {
    let mut h = Holders::default();
    h.add(10, "rxe0", PD);
    h.add(10, "rxe0", CTX);
    h.add(10, "rxe0", PD);
    assert_eq!(
        h.pids[&10].iter().cloned().collect::<Vec<_>>(),
        vec!["rxe0 ctx", "rxe0 pd"]
    );
}

#[test]
fn only_the_running_kernel_is_asked() {
    let t = tempfile::tempdir().unwrap();
    let host = ReadHost::new(crate::host::Host::new(t.path()));
    assert_eq!(live(&host, true), Err(Unavailable::NotLive));
}

/// An answer is folded a datagram at a time; past the bound on entries it is
/// not used, and the error says how many and of what.
#[test]
fn answers_are_folded_as_they_arrive_and_bounded() {
    let mut h = Holders::default();
    let mut entries = 0;
    let first = answer(PD, 4, &[Some(10), None, Some(11)]);
    let step = fold_datagram(&first, PD, 4, "rxe0", &mut h, &mut entries, 5).unwrap();
    assert_eq!((step, entries), (Step::More, 2));
    assert_eq!(h.pids.keys().copied().collect::<Vec<_>>(), [10, 11]);
    let step = fold_datagram(&done(4, 0), PD, 4, "rxe0", &mut h, &mut entries, 5).unwrap();
    assert_eq!(step, Step::Done);
    // One more datagram of four: over the bound of five.
    let more = answer(PD, 5, &[Some(12), Some(13), Some(14), Some(15)]);
    let e = fold_datagram(&more, PD, 5, "rxe0", &mut h, &mut entries, 5).unwrap_err();
    assert_eq!(
        e,
        Unavailable::TooMany {
            limit: 5,
            what: "resources"
        }
    );
    assert!(e.to_string().contains("more than 5 RDMA resources"), "{e}");
}
