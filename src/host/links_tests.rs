use super::*;
use std::os::unix::fs::{PermissionsExt, lchown, symlink};

fn tree() -> (tempfile::TempDir, Host) {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir_all(t.path().join("etc/containerd/conf.d")).unwrap();
    fs::create_dir_all(t.path().join("opt/cm")).unwrap();
    fs::write(t.path().join("etc/shadow"), "root:$6$secret:1::::::\n").unwrap();
    fs::write(t.path().join("etc/containerd/real.toml"), "version = 2\n").unwrap();
    fs::write(t.path().join("opt/cm/containerd.toml"), "version = 2\n").unwrap();
    let h = Host::new(t.path());
    (t, h)
}

/// Only root can give a file away; elsewhere the owner cases cannot be set up.
fn as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn err(h: &Host, p: &str) -> String {
    h.resolve_managed(Path::new(p)).unwrap_err().to_string()
}

#[test]
fn plain_files_and_absent_paths_are_themselves() {
    let (_t, h) = tree();
    for p in ["/etc/containerd/real.toml", "/etc/containerd/absent.toml"] {
        assert_eq!(
            h.resolve_managed(Path::new(p)).unwrap(),
            Resolved {
                real: p.into(),
                link: None
            }
        );
    }
}

#[test]
fn links_to_config_files_are_followed() {
    let (t, h) = tree();
    let c = t.path().join("etc/containerd");
    symlink("real.toml", c.join("config.toml")).unwrap();
    symlink("/etc/containerd/real.toml", c.join("conf.d/abs.toml")).unwrap();
    symlink("../config.toml", c.join("conf.d/chain.toml")).unwrap();
    for (p, stored) in [
        ("/etc/containerd/config.toml", "real.toml"),
        (
            "/etc/containerd/conf.d/abs.toml",
            "/etc/containerd/real.toml",
        ),
        ("/etc/containerd/conf.d/chain.toml", "../config.toml"),
    ] {
        let r = h.resolve_managed(Path::new(p)).unwrap();
        assert_eq!(r.real, PathBuf::from("/etc/containerd/real.toml"), "{p}");
        assert_eq!(r.link, Some(PathBuf::from(stored)), "{p}");
    }
}

/// Config management's layout: links out of /etc to /opt, a link to a link, a
/// linked directory; an absolute target is read inside the root.
#[test]
fn trusted_links_out_of_the_config_directories_are_followed() {
    let (t, h) = tree();
    let c = t.path().join("etc/containerd");
    symlink("/opt/cm/containerd.toml", c.join("config.toml")).unwrap();
    symlink("/opt/cm/current.toml", c.join("chain.toml")).unwrap();
    symlink("containerd.toml", t.path().join("opt/cm/current.toml")).unwrap();
    symlink("/opt/cm", c.join("cm")).unwrap();
    for (p, stored) in [
        (
            "/etc/containerd/config.toml",
            Some("/opt/cm/containerd.toml"),
        ),
        ("/etc/containerd/chain.toml", Some("/opt/cm/current.toml")),
        ("/etc/containerd/cm/containerd.toml", None),
    ] {
        let r = h.resolve_managed(Path::new(p)).unwrap();
        assert_eq!(r.real, PathBuf::from("/opt/cm/containerd.toml"), "{p}");
        assert_eq!(r.link, stored.map(PathBuf::from), "{p}");
        assert_eq!(h.path(&r.real), t.path().join("opt/cm/containerd.toml"));
    }
    // A new file in a linked directory goes where the link leads.
    let r = h
        .resolve_managed(Path::new("/etc/containerd/cm/new/spec.json"))
        .unwrap();
    assert_eq!(r.real, PathBuf::from("/opt/cm/new/spec.json"));
    // The entry itself is not followed: a removal or restore acts on the link.
    assert_eq!(
        h.resolve_entry(Path::new("/etc/containerd/config.toml"))
            .unwrap(),
        PathBuf::from("/etc/containerd/config.toml")
    );
    assert_eq!(
        h.resolve_entry(Path::new("/etc/containerd/cm/current.toml"))
            .unwrap(),
        PathBuf::from("/opt/cm/current.toml")
    );
}

#[test]
fn unexpected_links_are_refused_naming_link_and_target() {
    let (t, h) = tree();
    let c = t.path().join("etc/containerd");
    symlink("/etc/shadow", c.join("shadow.toml")).unwrap();
    symlink("../../../../../../etc/shadow", c.join("climb.toml")).unwrap();
    symlink("/../../etc/shadow", c.join("abs-climb.toml")).unwrap();
    symlink("missing.toml", c.join("dangling.toml")).unwrap();
    symlink("/opt/cm/missing.toml", c.join("dangling-abs.toml")).unwrap();
    symlink("conf.d", c.join("dir.toml")).unwrap();
    symlink("..", c.join("up.toml")).unwrap();
    symlink("loop.toml", c.join("loop.toml")).unwrap();
    symlink("ping.toml", c.join("pong.toml")).unwrap();
    symlink("pong.toml", c.join("ping.toml")).unwrap();
    symlink("/etc", c.join("up")).unwrap();
    symlink(".", c.join("here")).unwrap();
    symlink("up/shadow", c.join("via-dir.toml")).unwrap();
    // A link back to its own directory, walked twice, is no loop.
    assert_eq!(
        h.resolve_managed(Path::new("/etc/containerd/here/here/real.toml"))
            .unwrap()
            .real,
        PathBuf::from("/etc/containerd/real.toml")
    );
    let mut cases = vec![
        ("climb.toml", "climbs above the root"),
        ("abs-climb.toml", "climbs above the root"),
        ("dangling.toml", "does not exist"),
        ("dangling-abs.toml", "does not exist"),
        ("dir.toml", "which is a directory"),
        ("up.toml", "which is a directory"),
        ("loop.toml", "a loop"),
        ("ping.toml", "a loop"),
    ];
    // Planted by someone besides root (a hostPath pod running as a user): the
    // link to the secret is refused, naming the link.
    if as_root() {
        for l in ["shadow.toml", "via-dir.toml"] {
            lchown(c.join(l), Some(65534), Some(65534)).unwrap();
            cases.push((l, "(a link, owned by uid 65534) is not owned by root"));
        }
    }
    for (name, why) in cases {
        let e = err(&h, &format!("/etc/containerd/{name}"));
        assert!(e.contains(&format!("etc/containerd/{name}")), "{e}");
        assert!(e.contains(why), "{name}: {e}");
        assert!(!e.contains("secret"), "{e}");
    }
}

/// Following needs every element trusted: the target, the directories on the
/// target's path and on the link's, each named with its owner and mode.
#[test]
fn a_chain_anyone_but_root_could_change_is_refused() {
    let (t, h) = tree();
    let c = t.path().join("etc/containerd");
    symlink("/opt/cm/containerd.toml", c.join("config.toml")).unwrap();
    let p = "/etc/containerd/config.toml";
    let mode = |rel: &str, m: u32| {
        fs::set_permissions(t.path().join(rel), fs::Permissions::from_mode(m)).unwrap()
    };
    for (rel, bad, good, shown) in [
        ("opt/cm/containerd.toml", 0o664, 0o644, "the target"),
        ("opt/cm/containerd.toml", 0o646, 0o644, "the target"),
        ("opt/cm", 0o775, 0o755, "a directory"),
        ("opt", 0o777, 0o755, "a directory"),
        ("etc/containerd", 0o775, 0o755, "a directory"),
        ("etc", 0o757, 0o755, "a directory"),
    ] {
        mode(rel, bad);
        let e = err(&h, p);
        let named = format!("{} ({shown}, ", t.path().join(rel).display());
        assert!(e.contains(&named), "{rel}: {e}");
        assert!(e.contains(&format!("mode {bad:04o}")), "{rel}: {e}");
        assert!(e.contains("writable by"), "{rel}: {e}");
        mode(rel, good);
    }
    // A sticky directory others may add to (like /tmp) is fine, as for configs.
    mode("opt", 0o1777);
    assert!(h.resolve_managed(Path::new(p)).is_ok());
    mode("opt", 0o755);
    if as_root() {
        let target = t.path().join("opt/cm/containerd.toml");
        std::os::unix::fs::chown(&target, Some(1000), None).unwrap();
        let e = err(&h, p);
        assert!(
            e.contains("owned by uid 1000") && e.contains("not owned by root"),
            "{e}"
        );
        std::os::unix::fs::chown(&target, Some(0), None).unwrap();
        // A directory link on the way counts as a link.
        symlink("/opt/cm", c.join("cm")).unwrap();
        lchown(c.join("cm"), Some(1000), None).unwrap();
        let e = err(&h, "/etc/containerd/cm/containerd.toml");
        assert!(e.contains("cm (a link, owned by uid 1000)"), "{e}");
    }
    assert!(h.resolve_managed(Path::new(p)).is_ok());
    // A path with no link on it is not this rule's business.
    mode("etc/containerd", 0o777);
    assert!(
        h.resolve_managed(Path::new("/etc/containerd/real.toml"))
            .is_ok()
    );
}

/// `--root` given as a link (a tree under /var/tmp linked from elsewhere): the
/// root is judged as the directory it is, not as a link's 0777.
#[test]
fn a_root_given_as_a_link_is_judged_as_its_directory() {
    let (t, _) = tree();
    let c = t.path().join("etc/containerd");
    symlink("/opt/cm/containerd.toml", c.join("config.toml")).unwrap();
    let outer = tempfile::tempdir().unwrap();
    symlink(t.path(), outer.path().join("root")).unwrap();
    let h = Host::new(outer.path().join("root"));
    let r = h
        .resolve_managed(Path::new("/etc/containerd/config.toml"))
        .unwrap();
    assert_eq!(r.real, PathBuf::from("/opt/cm/containerd.toml"));
}
