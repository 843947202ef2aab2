use super::*;

#[test]
fn paths_under_the_root_are_normalized_the_same_fast_or_not() {
    let h = Host::new(Path::new("/r/t"));
    let live = Host::new(Path::new("/"));
    for (p, want) in [
        (
            "/sys/class/infiniband/mlx5_0",
            "/r/t/sys/class/infiniband/mlx5_0",
        ),
        ("/", "/r/t"),
        ("", "/r/t"),
        ("sys/x", "/r/t/sys/x"),
        ("/sys//x/", "/r/t/sys/x"),
        ("/sys/./x", "/r/t/sys/x"),
        ("/sys/../../../etc", "/r/t/etc"),
        ("/a/..b/.c", "/r/t/a/..b/.c"),
        ("/a/b/..", "/r/t/a"),
    ] {
        assert_eq!(h.path(Path::new(p)), Path::new(want), "{p:?}");
        let on_live = want
            .strip_prefix("/r/t")
            .filter(|r| !r.is_empty())
            .unwrap_or("/");
        assert_eq!(live.path(Path::new(p)), Path::new(on_live), "{p:?} on /");
    }
    assert!(is_normal(Path::new("/a/..b")));
    for p in ["/", "", "a", "/a/", "/a//b", "/a/./b", "/a/../b", "/a/.."] {
        assert!(!is_normal(Path::new(p)), "{p:?}");
    }
}

#[test]
fn read_string_reads_small_and_large_files_whole() {
    let t = tempfile::tempdir().unwrap();
    let h = Host::new(t.path());
    for len in [0, 5, 511, 512, 513, 4095, 4096, 4097, 20_000] {
        let text: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        fs::write(t.path().join("f"), &text).unwrap();
        assert_eq!(
            h.read_string(Path::new("/f")).unwrap(),
            Some(text),
            "{len} bytes"
        );
    }
    assert_eq!(h.read_string(Path::new("/absent")).unwrap(), None);
    fs::write(t.path().join("bad"), [0xff, 0xfe]).unwrap();
    assert!(matches!(
        h.read_string(Path::new("/bad")),
        Err(HostError::NotUtf8 { .. })
    ));
}

#[test]
fn a_read_only_file_system_says_what_to_do() {
    let e = |errno| HostError::Write {
        path: "/etc/modprobe.d/x.conf".into(),
        source: io::Error::from_raw_os_error(errno),
    };
    let rofs = e(nix::libc::EROFS).to_string();
    assert!(rofs.starts_with("cannot write /etc/modprobe.d/x.conf: Read-only file system"));
    assert!(
        rofs.contains("`systemctl restart rdma-node-agent`"),
        "{rofs}"
    );
    assert!(!e(nix::libc::ENOSPC).to_string().contains("systemctl"));
}

#[test]
fn paths_stay_under_the_root() {
    let h = Host::new("/tmp/r");
    assert_eq!(h.path(Path::new("/etc/x")), PathBuf::from("/tmp/r/etc/x"));
    assert_eq!(
        h.path(Path::new("/../../etc/x")),
        PathBuf::from("/tmp/r/etc/x")
    );
}

#[test]
fn glob_returns_host_paths() {
    let t = tempfile::tempdir().unwrap();
    let h = Host::new(t.path());
    h.write_atomic(Path::new("/etc/c/conf.d/b.toml"), b"", 0o644)
        .unwrap();
    h.write_atomic(Path::new("/etc/c/conf.d/a.toml"), b"", 0o644)
        .unwrap();
    assert_eq!(
        h.glob("/etc/c/conf.d/*.toml").unwrap(),
        vec![
            PathBuf::from("/etc/c/conf.d/a.toml"),
            PathBuf::from("/etc/c/conf.d/b.toml")
        ]
    );
}

#[test]
fn missing_files_are_none() {
    let t = tempfile::tempdir().unwrap();
    let h = Host::new(t.path());
    assert!(h.read(Path::new("/nope")).unwrap().is_none());
    assert!(h.list_dir(Path::new("/nope")).unwrap().is_empty());
    h.remove(Path::new("/nope")).unwrap();
}
