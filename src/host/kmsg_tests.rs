use super::*;
use crate::host::Host;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kmsg");
const ALL: Caps = Caps {
    max_bytes: 1 << 20,
    max_records: 10_000,
};

/// A root whose /dev/kmsg is the fixture file.
fn root_with(fixture: &str) -> (tempfile::TempDir, ReadHost) {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("dev")).unwrap();
    std::fs::copy(format!("{FIXTURES}/{fixture}"), t.path().join("dev/kmsg")).unwrap();
    let host = ReadHost::new(Host::new(t.path()));
    (t, host)
}

#[test]
fn parses_the_abi_documents_records() {
    let (_t, host) = root_with("dev-kmsg-abi.txt");
    let log = read(&host, None, &|_| true, ALL).unwrap();
    assert_eq!(log.records.len(), 3);
    let r = &log.records[0];
    assert_eq!((r.seq, r.level), (160, 7));
    assert!(r.text.starts_with("pci_root PNP0A03:00: host bridge"));
    assert_eq!(r.device.as_deref(), Some("+acpi:PNP0A03:00"));
    // Facility 3 (daemon) << 3 | level 6.
    let udevd = &log.records[2];
    assert_eq!((udevd.seq, udevd.facility, udevd.level), (340, 3, 6));
    assert_eq!(r.facility, 0);
    assert_eq!((log.first_seq, log.last_seq), (Some(160), Some(340)));
    assert!(!log.truncated);
}

#[test]
fn keeps_only_what_the_filter_takes_after_the_given_record() {
    let (_t, host) = root_with("mlx5-public.txt");
    let mlx5 = |r: &Record| r.text.starts_with("mlx5_core ");
    let log = read(&host, None, &mlx5, ALL).unwrap();
    assert_eq!(log.records.len(), 8);
    let after = read(&host, Some(1301), &mlx5, ALL).unwrap();
    assert_eq!(
        after.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1302, 1401, 1402, 1403]
    );
    // The last sequence number is the buffer's, kept or not.
    assert_eq!(after.last_seq, Some(1403));
}

#[test]
fn caps_stop_the_pass_and_say_so() {
    let (_t, host) = root_with("mlx5-public.txt");
    let few = Caps {
        max_bytes: 1 << 20,
        max_records: 2,
    };
    let log = read(&host, None, &|_| true, few).unwrap();
    assert_eq!(log.records.len(), 2);
    assert!(log.truncated);
    let small = Caps {
        max_bytes: 100,
        max_records: 100,
    };
    assert!(read(&host, None, &|_| true, small).unwrap().truncated);
}

#[test]
fn garbage_records_are_skipped_not_fatal() {
    assert_eq!(parse_record("no header here"), None);
    assert_eq!(parse_record("x,1,2,-;text"), None);
    let r = parse_record("3,7,99,-,caller=T12;text\n DEVICE=+pci:0000:01:00.0").unwrap();
    assert_eq!((r.seq, r.level, r.text.as_str()), (7, 3, "text"));
}

#[test]
fn absent_off_the_live_host_and_denied_reads_say_why() {
    let t = tempfile::tempdir().unwrap();
    let host = ReadHost::new(Host::new(t.path()));
    let e = read(&host, None, &|_| true, ALL).unwrap_err();
    assert!(matches!(e, KmsgError::Absent { .. }), "{e}");
    let denied = open_error(
        "/dev/kmsg".into(),
        io::Error::from_raw_os_error(nix::errno::Errno::EPERM as i32),
    );
    assert!(denied.to_string().contains("CAP_SYSLOG"), "{denied}");
}

/// The running kernel's log, as root: the reader stops at the end of the buffer.
#[test]
#[ignore = "reads the live /dev/kmsg (root)"]
fn reads_the_live_kernel_log_to_its_end() {
    let host = ReadHost::new(Host::new("/"));
    let log = read(&host, None, &|_| true, ALL).unwrap();
    assert!(log.last_seq.is_some(), "{log:?}");
    assert!(!log.records.is_empty());
}

/// /dev/null where /dev/kmsg should be (a container's stand-in) is refused,
/// not read as a clean, empty log.
#[test]
fn a_stand_in_device_is_not_the_kernel_log() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("dev")).unwrap();
    std::os::unix::fs::symlink("/dev/null", t.path().join("dev/kmsg")).unwrap();
    let host = ReadHost::new(Host::new(t.path()));
    let e = read(&host, None, &|_| true, ALL).unwrap_err();
    assert!(
        matches!(
            e,
            KmsgError::NotKmsg {
                major: 1,
                minor: 3,
                ..
            }
        ),
        "{e}"
    );
}
