//! Links at the files the agent writes whole (its drop-in, its modprobe
//! options, its base spec, the NFD file): never followed, whoever owns them.
//! A root-owned link there is what the trusted-link rule (`links.rs`) would
//! follow for containerd's config; here it is refused, naming the link, the
//! target's content is neither printed nor replaced, by plan, apply or revert.

use std::fs;
use std::path::Path;

use super::code;
use super::support::*;

const DROPIN: &str = "etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf";
const MODPROBE: &str = "etc/modprobe.d/rdma-node-agent.conf";
const SPEC: &str = "etc/containerd/rdma-node-agent/base-spec.json";
const NFD: &str = "etc/kubernetes/node-feature-discovery/features.d/rdma-node-agent";
const PASSWD: &str = "root:$6$PASSWDHASH$abc:0:0:root:/root:/bin/bash\n";
const GROUP: &str = "sudo:x:27:GROUPSECRET\n";

/// The v100 node with the netns mode to persist (so the modprobe file is the
/// agent's to write) and the NFD file on.
fn node_with_own_files() -> tempfile::TempDir {
    let t = node("v100");
    let a = t.path().join("etc/rdma-node-agent");
    fs::create_dir_all(&a).unwrap();
    fs::write(
        a.join("config.toml"),
        "[rdma]\nnetns_mode = \"exclusive\"\n[nfd]\nenabled = true\n",
    )
    .unwrap();
    fs::write(t.path().join("etc/passwd.copy"), PASSWD).unwrap();
    fs::write(t.path().join("etc/group.copy"), GROUP).unwrap();
    t
}

/// A root-owned link at `own` to `target` (absolute, read inside the root).
fn plant(root: &Path, own: &str, target: &str) {
    let p = root.join(own);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&p);
    std::os::unix::fs::symlink(target, &p).unwrap();
}

fn all(o: &std::process::Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

fn targets_untouched(root: &Path) {
    assert_eq!(
        fs::read_to_string(root.join("etc/passwd.copy")).unwrap(),
        PASSWD
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/group.copy")).unwrap(),
        GROUP
    );
}

#[test]
fn root_owned_links_at_the_agents_own_files_are_refused_by_plan_and_apply() {
    for (own, target, secret) in [
        (DROPIN, "/etc/passwd.copy", "PASSWDHASH"),
        (MODPROBE, "/etc/group.copy", "GROUPSECRET"),
        (SPEC, "/etc/passwd.copy", "PASSWDHASH"),
        (NFD, "/etc/group.copy", "GROUPSECRET"),
    ] {
        let t = node_with_own_files();
        plant(t.path(), own, target);
        for args in [
            &["plan"][..],
            &["plan", "--json"],
            &["check", "--json"],
            &["apply"],
        ] {
            let o = agent(t.path(), args);
            let out = all(&o);
            assert!(
                !out.contains(secret),
                "{own}: {args:?} printed the target: {out}"
            );
            // `check` does not read the NFD file (only the plan writes it).
            if args[0] == "check" && own == NFD {
                continue;
            }
            assert!(
                out.contains(own)
                    && out.contains(&format!("symbolic link (to {target}"))
                    && out.contains("the agent writes whole"),
                "{own}: {args:?} did not refuse naming the link: {out}"
            );
            if args == ["apply"] {
                assert_ne!(code(&o), 0, "{own}: apply said all is well: {out}");
            }
        }
        targets_untouched(t.path());
        assert!(
            t.path().join(own).is_symlink(),
            "{own}: the link was replaced"
        );
    }
}

/// After an apply, a link planted at a file the agent wrote: revert refuses it,
/// naming it, rather than restore or remove through it.
#[test]
fn revert_never_writes_through_a_link_planted_at_an_own_file() {
    let t = node_with_own_files();
    let o = agent(t.path(), &["apply"]);
    assert_eq!(code(&o), 0, "{}", all(&o));
    assert!(t.path().join(DROPIN).is_file() && t.path().join(MODPROBE).is_file());
    plant(t.path(), DROPIN, "/etc/passwd.copy");
    plant(t.path(), MODPROBE, "/etc/group.copy");
    let o = agent(t.path(), &["revert"]);
    let out = all(&o);
    assert_ne!(code(&o), 0, "revert went through: {out}");
    assert!(
        !out.contains("PASSWDHASH") && !out.contains("GROUPSECRET"),
        "{out}"
    );
    assert!(out.contains("the agent writes whole"), "{out}");
    targets_untouched(t.path());
    assert!(t.path().join(DROPIN).is_symlink() && t.path().join(MODPROBE).is_symlink());
}
