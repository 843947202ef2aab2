use super::*;

fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((NLA_HDRLEN + v.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(v);
    a.resize(align4(a.len()), 0);
    a
}

/// A reporter message as devlink_nl_health_reporter_fill() lays it out.
pub(crate) fn reporter_msg(
    family: u16,
    seq: u32,
    dev: &str,
    name: &str,
    state: u8,
    errors: u64,
) -> Vec<u8> {
    let mut nest = attr(
        DEVLINK_ATTR_HEALTH_REPORTER_NAME,
        format!("{name}\0").as_bytes(),
    );
    nest.extend(attr(DEVLINK_ATTR_HEALTH_REPORTER_STATE, &[state]));
    nest.extend(attr(
        DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT,
        &errors.to_ne_bytes(),
    ));
    nest.extend(attr(
        DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT,
        &1u64.to_ne_bytes(),
    ));
    let mut body = attr(DEVLINK_ATTR_BUS_NAME, b"pci\0");
    body.extend(attr(DEVLINK_ATTR_DEV_NAME, format!("{dev}\0").as_bytes()));
    body.extend(attr(DEVLINK_ATTR_HEALTH_REPORTER | 0x8000, &nest));
    let mut m = genl(
        NLMSG_HDRLEN + GENL_HDRLEN + body.len(),
        family,
        0x2,
        seq,
        DEVLINK_CMD_HEALTH_REPORTER_GET,
        1,
    );
    m.extend(body);
    m
}

#[test]
fn decodes_a_dump_of_reporters_and_its_end() {
    let mut d = reporter_msg(27, 5, "0000:03:00.0", "fw_fatal", 1, 3);
    d.extend(reporter_msg(27, 5, "0000:03:00.0", "fw", 0, 0));
    d.extend(header(20, NLMSG_DONE, 0x2, 5));
    d.extend_from_slice(&0u32.to_ne_bytes());
    let a = decode(&d, 5, Some(27)).unwrap();
    assert_eq!(a.end, Some(Ok(())));
    assert_eq!(a.reporters.len(), 2);
    let r = &a.reporters[0];
    assert_eq!(r.instance, "pci/0000:03:00.0");
    assert_eq!(
        (r.name.as_str(), r.state, r.errors, r.recovers),
        ("fw_fatal", 1, 3, 1)
    );
    assert_eq!(r.state_name(), "error");
    assert_eq!(r.last_dump_unix, None);
    // Another request's messages are not this one's.
    assert!(decode(&d, 6, Some(27)).unwrap().reporters.is_empty());
}

#[test]
fn a_reporter_without_its_counts_is_malformed_not_zero() {
    let mut body = attr(DEVLINK_ATTR_BUS_NAME, b"pci\0");
    body.extend(attr(DEVLINK_ATTR_DEV_NAME, b"0000:03:00.0\0"));
    body.extend(attr(
        DEVLINK_ATTR_HEALTH_REPORTER,
        &attr(DEVLINK_ATTR_HEALTH_REPORTER_NAME, b"fw\0"),
    ));
    let mut m = genl(
        NLMSG_HDRLEN + GENL_HDRLEN + body.len(),
        27,
        0x2,
        1,
        DEVLINK_CMD_HEALTH_REPORTER_GET,
        1,
    );
    m.extend(body);
    let e = decode(&m, 1, Some(27)).unwrap_err().to_string();
    assert!(e.contains("without a state"), "{e}");
}

#[test]
fn family_reply_and_enoent() {
    let mut m = genl(NLMSG_HDRLEN + GENL_HDRLEN + 8, GENL_ID_CTRL, 0, 1, 1, 2);
    m.extend(attr(CTRL_ATTR_FAMILY_ID, &27u16.to_ne_bytes()));
    assert_eq!(decode(&m, 1, None).unwrap().family, Some(27));
    let mut err = header(36, NLMSG_ERROR, 0x100, 2);
    err.extend_from_slice(&(-(Errno::ENOENT as i32)).to_ne_bytes());
    err.extend(encode_get_family(2)[..16].to_vec());
    let a = decode(&err, 2, None).unwrap();
    assert_eq!(a.end, Some(Err((Errno::ENOENT as i32, None))));
}

#[test]
fn errors_read_clearly() {
    assert!(
        DevlinkError::NoFamily
            .to_string()
            .contains("CONFIG_NET_DEVLINK")
    );
    let k = DevlinkError::Kernel {
        errno: Errno::EPERM,
        message: Some("no".into()),
    };
    assert!(
        k.to_string().contains("EPERM") && k.to_string().ends_with(": no"),
        "{k}"
    );
}

/// The running kernel's devlink family answers a dump (empty on a machine without devlink devices).
#[test]
#[ignore = "asks the live kernel over generic netlink"]
fn the_live_kernel_answers_the_dump() {
    let host = ReadHost::new(crate::host::Host::new("/"));
    match live(&host) {
        Ok(r) => eprintln!("{} reporter(s): {r:?}", r.len()),
        Err(DevlinkError::NoFamily) => eprintln!("no devlink family on this kernel"),
        Err(e) => panic!("{e}"),
    }
}
