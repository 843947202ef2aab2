use super::*;

fn change(path: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> FileChange {
    FileChange {
        path: path.into(),
        old: old.map(<[u8]>::to_vec),
        new: new.map(<[u8]>::to_vec),
        mode: 0o644,
        owner: "test",
        reason: "test".into(),
        restart: Vec::new(),
    }
}

#[test]
fn apply_then_revert_is_byte_identical() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::new(t.path());
    host.write_atomic(Path::new("/etc/a.toml"), b"# mine\na = 1\n", 0o640)
        .unwrap();
    let plan = Plan {
        changes: vec![
            change("/etc/a.toml", Some(b"# mine\na = 1\n"), Some(b"a = 2\n")),
            change("/etc/new/dir/spec.json", None, Some(b"{}\n")),
        ],
        ..Plan::default()
    };
    let mut l = Ledger::load(&host.reader()).unwrap();
    l.apply(&host, &plan).unwrap();
    // A second apply of the same plan must not overwrite the saved original.
    l.apply(&host, &plan).unwrap();
    let l = Ledger::load(&host.reader()).unwrap();
    assert_eq!(l.files.len(), 2);
    let out = l.revert(&host, false).unwrap();
    assert_eq!(out.restored, vec![PathBuf::from("/etc/a.toml")]);
    assert_eq!(out.removed, vec![PathBuf::from("/etc/new/dir/spec.json")]);
    let a = host.read(Path::new("/etc/a.toml")).unwrap().unwrap();
    assert_eq!(a.bytes, b"# mine\na = 1\n");
    assert_eq!(a.mode, 0o640);
    assert!(!host.exists(Path::new("/etc/new")));
    assert!(!host.exists(&state_path("ledger.json")));
    let journal = String::from_utf8(
        host.state_read(&state_path("journal.jsonl"))
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(journal.lines().count(), 6);
}

#[test]
fn rollback_returns_to_the_bytes_before_this_apply() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::new(t.path());
    host.write_atomic(Path::new("/etc/a"), b"v1", 0o644)
        .unwrap();
    let mut l = Ledger::default();
    let first = Plan {
        changes: vec![change("/etc/a", Some(b"v1"), Some(b"v2"))],
        ..Plan::default()
    };
    l.apply(&host, &first).unwrap();
    let second = Plan {
        changes: vec![
            change("/etc/a", Some(b"v2"), Some(b"v3")),
            change("/etc/d/new", None, Some(b"n")),
        ],
        ..Plan::default()
    };
    l.apply(&host, &second).unwrap();
    l.rollback(&host, &second).unwrap();
    assert_eq!(
        host.read(Path::new("/etc/a")).unwrap().unwrap().bytes,
        b"v2"
    );
    assert!(!host.exists(Path::new("/etc/d")));
    // Revert still knows the very first original.
    let out = Ledger::load(&host.reader())
        .unwrap()
        .revert(&host, false)
        .unwrap();
    assert_eq!(out.restored, vec![PathBuf::from("/etc/a")]);
    assert_eq!(
        host.read(Path::new("/etc/a")).unwrap().unwrap().bytes,
        b"v1"
    );
}

#[test]
fn revert_keeps_files_edited_since() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::new(t.path());
    host.write_atomic(Path::new("/etc/a"), b"1", 0o644).unwrap();
    let mut l = Ledger::default();
    l.apply(
        &host,
        &Plan {
            changes: vec![change("/etc/a", Some(b"1"), Some(b"2"))],
            ..Plan::default()
        },
    )
    .unwrap();
    host.write_atomic(Path::new("/etc/a"), b"3", 0o644).unwrap();
    let out = Ledger::load(&host.reader())
        .unwrap()
        .revert(&host, false)
        .unwrap();
    assert_eq!(out.kept.len(), 1);
    assert!(out.kept[0].1.contains("changed since the agent wrote it"));
    assert_eq!(host.read(Path::new("/etc/a")).unwrap().unwrap().bytes, b"3");
    // --force restores the original anyway.
    let out = Ledger::load(&host.reader())
        .unwrap()
        .revert(&host, true)
        .unwrap();
    assert_eq!(out.restored.len(), 1);
    assert_eq!(host.read(Path::new("/etc/a")).unwrap().unwrap().bytes, b"1");
}

/// A file linked out of /etc and a file created in a linked directory: the
/// targets change, revert restores (or removes) them and the links stay.
#[test]
fn revert_acts_on_link_targets_and_keeps_the_links() {
    use std::os::unix::fs::symlink;
    let t = tempfile::tempdir().unwrap();
    let host = Host::new(t.path());
    let cm = Path::new("/opt/cm/app.toml");
    host.write_atomic(cm, b"v1", 0o640).unwrap();
    host.write_atomic(Path::new("/opt/cm-etc/x"), b"", 0o644)
        .unwrap();
    std::fs::create_dir_all(t.path().join("etc")).unwrap();
    symlink(cm, t.path().join("etc/c.toml")).unwrap();
    symlink("/opt/cm-etc", t.path().join("etc/cm")).unwrap();
    let plan = Plan {
        changes: vec![
            change("/etc/c.toml", Some(b"v1"), Some(b"v2")),
            change("/etc/cm/new/spec.json", None, Some(b"{}")),
        ],
        ..Plan::default()
    };
    let mut l = Ledger::default();
    l.apply(&host, &plan).unwrap();
    assert_eq!(
        std::fs::read(t.path().join("opt/cm/app.toml")).unwrap(),
        b"v2"
    );
    assert!(t.path().join("opt/cm-etc/new/spec.json").is_file());
    let spec = &l.files[Path::new("/etc/cm/new/spec.json")];
    assert_eq!(spec.created_dirs, vec![PathBuf::from("/opt/cm-etc/new")]);
    assert_eq!(l.files[Path::new("/etc/c.toml")].link.as_deref(), Some(cm));
    let out = Ledger::load(&host.reader())
        .unwrap()
        .revert(&host, false)
        .unwrap();
    assert_eq!((out.restored.len(), out.removed.len()), (1, 1));
    let d = host.read(cm).unwrap().unwrap();
    assert_eq!((d.bytes.as_slice(), d.mode), (&b"v1"[..], 0o640));
    assert_eq!(std::fs::read_link(t.path().join("etc/c.toml")).unwrap(), cm);
    assert!(!t.path().join("opt/cm-etc/new").exists());
    assert!(t.path().join("etc/cm").is_symlink());
}

/// A config that would name a spec the same apply cannot create: the spec's
/// directory cannot be made (a file stands where it would go), so nothing is
/// written, no temp file or directory is left, and the ledger records nothing.
#[test]
fn a_change_is_written_whole_or_not_at_all() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::new(t.path());
    let config = b"version = 2\n".as_slice();
    host.write_atomic(Path::new("/etc/c/config.toml"), config, 0o644)
        .unwrap();
    host.write_atomic(Path::new("/etc/old.json"), b"{}", 0o644)
        .unwrap();
    host.write_atomic(Path::new("/var/blocker"), b"", 0o644)
        .unwrap();
    let plan = Plan {
        changes: vec![
            change(
                "/etc/c/config.toml",
                Some(config),
                Some(b"version = 2\nbase_runtime_spec = \"/var/blocker/d/spec.json\"\n"),
            ),
            change("/etc/new/spec.json", None, Some(b"{}")),
            change("/etc/old.json", Some(b"{}"), None),
            change("/var/blocker/d/spec.json", None, Some(b"{}")),
        ],
        ..Plan::default()
    };
    let mut l = Ledger::default();
    let e = l.apply(&host, &plan).unwrap_err();
    assert!(
        matches!(&e, LedgerError::NotWritten { files: 4, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("nothing was written"), "{e}");
    let read = |p: &str| host.read(Path::new(p)).unwrap().map(|d| d.bytes);
    assert_eq!(read("/etc/c/config.toml").as_deref(), Some(config));
    assert_eq!(read("/etc/old.json").as_deref(), Some(&b"{}"[..]));
    assert_eq!(
        host.list_dir(Path::new("/etc/c")).unwrap(),
        vec!["config.toml"]
    );
    assert_eq!(
        host.list_dir(Path::new("/etc")).unwrap(),
        vec!["c", "old.json"],
        "no directory made for the spec is left"
    );
    assert!(l.files.is_empty());
    assert!(!host.exists(&state_path("ledger.json")));
}
