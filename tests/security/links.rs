//! Symbolic links out of the config directories: followed when only root could
//! have made them (the link, its target and every directory on both paths owned
//! by root, writable by nobody else), refused naming the element otherwise.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink};
use std::path::{Path, PathBuf};

use super::support::*;
use super::{CONFIG, code, ok};

const TARGET: &str = "opt/cm/containerd.toml";

/// The v100 node with its containerd config moved to /opt/cm by "config
/// management" and linked back by an absolute link (read inside the root).
fn linked_node() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = node("v100");
    let link = t.path().join(CONFIG);
    let target = t.path().join(TARGET);
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    for d in ["opt", "opt/cm", "etc", "etc/containerd"] {
        fs::set_permissions(t.path().join(d), fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::rename(&link, &target).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    symlink("/opt/cm/containerd.toml", &link).unwrap();
    (t, link, target)
}

/// `containerd.memlock` as check reports it (status and message).
fn memlock(root: &Path) -> (String, String) {
    let c = check_in(
        &json(&agent(root, &["check", "--json"])),
        "containerd.memlock",
    );
    let s = |k: &str| c[k].as_str().unwrap().to_owned();
    (s("status"), s("message"))
}

/// What check says of the same node without the link, once applied: a linked
/// layout must be judged exactly as a plain one (on this fixture, a restart
/// pending, as containerd's process started before the change).
fn memlock_as_unlinked() -> (String, String) {
    let t = node("v100");
    ok(&agent(t.path(), &["apply"]));
    let plain = memlock(t.path());
    assert!(plain.1.contains("restart pending"), "{plain:?}");
    plain
}

/// The motivating layout: apply edits the target in place (mode, owner and
/// group kept), check says ok, revert restores the bytes and the link stays a link.
#[test]
fn a_config_linked_to_opt_is_applied_checked_and_reverted() {
    let (t, link, target) = linked_node();
    // root:adm 0640, as an admin keeps a config holding registry credentials.
    std::os::unix::fs::chown(&target, Some(0), Some(4)).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
    let before = snapshot(t.path());
    let original = fs::read(&target).unwrap();
    ok(&agent(t.path(), &["apply"]));
    assert!(link.is_symlink(), "apply replaced the link");
    assert_eq!(
        fs::read_link(&link).unwrap(),
        Path::new("/opt/cm/containerd.toml")
    );
    let edited = fs::read_to_string(&target).unwrap();
    assert!(
        edited.contains("base_runtime_spec"),
        "target not edited: {edited}"
    );
    let m = fs::metadata(&target).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 4, 0o640));
    assert_eq!(memlock(t.path()), memlock_as_unlinked());
    let plan = agent(t.path(), &["plan", "--exit-code"]);
    assert_eq!(code(&plan), 0, "not converged: {}", stdout(&plan));
    ok(&agent(t.path(), &["revert"]));
    assert!(link.is_symlink(), "revert replaced the link by a file");
    assert_eq!(
        fs::read_link(&link).unwrap(),
        Path::new("/opt/cm/containerd.toml")
    );
    assert_eq!(fs::read(&target).unwrap(), original);
    let m = fs::metadata(&target).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 4, 0o640));
    assert_eq!(snapshot(t.path()), before);
}

/// A link to a link (/etc → /srv/cm/current.toml → releases/7.toml): the last
/// target is edited, both links stay, revert is byte-for-byte.
#[test]
fn a_link_to_a_link_is_followed_to_the_file() {
    let t = node("v100");
    let link = t.path().join(CONFIG);
    let srv = t.path().join("srv/cm");
    fs::create_dir_all(srv.join("releases")).unwrap();
    fs::rename(&link, srv.join("releases/7.toml")).unwrap();
    symlink("releases/7.toml", srv.join("current.toml")).unwrap();
    symlink("../../srv/cm/current.toml", &link).unwrap();
    let before = snapshot(t.path());
    ok(&agent(t.path(), &["apply"]));
    assert!(
        fs::read_to_string(srv.join("releases/7.toml"))
            .unwrap()
            .contains("base_runtime_spec")
    );
    assert!(link.is_symlink() && srv.join("current.toml").is_symlink());
    assert_eq!(memlock(t.path()), memlock_as_unlinked());
    ok(&agent(t.path(), &["revert"]));
    assert_eq!(snapshot(t.path()), before);
    assert!(link.is_symlink() && srv.join("current.toml").is_symlink());
}

/// /etc/containerd itself an absolute link to /opt/cm-etc, resolved inside the
/// root (the kernel would follow it to the real /opt): the base spec the agent
/// creates goes behind the directory link, and revert removes that file and the
/// directory it made, never the link.
#[test]
fn a_linked_config_directory_gets_its_new_files_and_loses_them_on_revert() {
    let t = node("v100");
    let etc = t.path().join("etc/containerd");
    fs::create_dir_all(t.path().join("opt")).unwrap();
    fs::rename(&etc, t.path().join("opt/cm-etc")).unwrap();
    symlink("/opt/cm-etc", &etc).unwrap();
    assert!(
        !Path::new("/opt/cm-etc").exists(),
        "the host has the fixture's path"
    );
    let before = snapshot(t.path());
    ok(&agent(t.path(), &["apply"]));
    let spec = t.path().join("opt/cm-etc/rdma-node-agent/base-spec.json");
    assert!(spec.is_file(), "no base spec behind the directory link");
    assert!(etc.is_symlink());
    assert_eq!(memlock(t.path()), memlock_as_unlinked());
    ok(&agent(t.path(), &["revert"]));
    assert!(etc.is_symlink(), "revert removed the directory link");
    assert!(!t.path().join("opt/cm-etc/rdma-node-agent").exists());
    assert_eq!(snapshot(t.path()), before);
}

/// Each way the chain can be untrusted: refused by plan and apply, naming the
/// element and why, and nothing is written.
#[test]
fn untrusted_links_are_refused_naming_the_element() {
    type Spoil = fn(&Path);
    let cases: [(&str, Spoil, &str, &str); 5] = [
        (
            "a link owned by a user",
            |r| lchown(r.join(CONFIG), Some(65534), Some(65534)).unwrap(),
            "etc/containerd/config.toml (a link",
            "not owned by root",
        ),
        (
            "a target owned by a user",
            |r| std::os::unix::fs::chown(r.join(TARGET), Some(65534), None).unwrap(),
            "opt/cm/containerd.toml (the target",
            "not owned by root",
        ),
        (
            "a group-writable target",
            |r| fs::set_permissions(r.join(TARGET), fs::Permissions::from_mode(0o664)).unwrap(),
            "opt/cm/containerd.toml (the target",
            "writable by its group",
        ),
        (
            "a world-writable directory on the target's path",
            |r| fs::set_permissions(r.join("opt"), fs::Permissions::from_mode(0o777)).unwrap(),
            "/opt (a directory",
            "writable by others",
        ),
        (
            "a user's directory on the link's path",
            |r| std::os::unix::fs::chown(r.join("etc/containerd"), Some(1000), None).unwrap(),
            "etc/containerd (a directory",
            "not owned by root",
        ),
    ];
    for (what, spoil, element, why) in cases {
        let (t, link, target) = linked_node();
        spoil(t.path());
        let original = fs::read(&target).unwrap();
        for args in [&["plan"][..], &["apply"]] {
            let o = agent(t.path(), args);
            assert_ne!(code(&o), 0, "{what}: {args:?} followed it: {}", stdout(&o));
            let e = stderr(&o);
            assert!(
                e.contains("refusing")
                    && e.contains("etc/containerd/config.toml: it is a symbolic link")
                    && e.contains(element)
                    && e.contains(why),
                "{what}: {e}"
            );
        }
        assert_eq!(fs::read(&target).unwrap(), original, "{what}");
        assert!(link.is_symlink(), "{what}");
    }
}

/// Dangling links, loops and relative links climbing out of the root are
/// refused, saying so; an absolute link never reaches the real `/`.
#[test]
fn dangling_looping_and_escaping_links_are_refused() {
    let (t, link, _) = linked_node();
    let c = t.path().join("etc/containerd");
    symlink("b.toml", c.join("a.toml")).unwrap();
    symlink("a.toml", c.join("b.toml")).unwrap();
    for (target, why) in [
        ("/opt/cm/missing.toml", "does not exist"),
        ("a.toml", "loop"),
        (
            "../../../../../../../../../opt/cm/containerd.toml",
            "climbs above the root",
        ),
    ] {
        fs::remove_file(&link).unwrap();
        symlink(target, &link).unwrap();
        let o = agent(t.path(), &["apply"]);
        assert_ne!(code(&o), 0, "{target}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(e.contains("refusing") && e.contains(why), "{target}: {e}");
        assert_eq!(fs::read_link(&link).unwrap(), Path::new(target));
    }
    assert!(!t.path().join("opt/cm/missing.toml").exists());
}
