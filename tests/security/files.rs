//! Owners, modes and links: what a rewrite keeps, which links are followed,
//! and the agent's own state never reached through one.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink};
use std::path::Path;

use super::support::*;
use super::{CONFIG, STATE, code, ok};

/// The group (and owner) of an edited file survive apply, and revert restores them.
#[test]
fn owner_group_and_mode_survive_apply_and_revert() {
    let t = node("v100");
    let cfg = t.path().join(CONFIG);
    // 0600 root:adm, as an admin keeps a file holding registry credentials; and a
    // drop-in directory owned by a service account.
    std::os::unix::fs::chown(&cfg, Some(0), Some(4)).unwrap();
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o640)).unwrap();
    ok(&agent(t.path(), &["apply"]));
    let m = fs::metadata(&cfg).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 4, 0o640));
    // Someone fixes the group after the apply; revert puts back what the file had.
    std::os::unix::fs::chown(&cfg, Some(1), Some(1)).unwrap();
    ok(&agent(t.path(), &["revert", "--force"]));
    let m = fs::metadata(&cfg).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 4, 0o640));
}

/// A file created by the agent is never more open than the files beside it.
#[test]
fn new_files_take_their_siblings_mode() {
    let t = node("v100");
    let cfg = t.path().join(CONFIG);
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o600)).unwrap();
    // The base spec goes to a new directory (0644 default), the drop-in too: the
    // spec's directory is new, so put one beside the config to see the rule.
    let out = agent(t.path(), &["apply"]);
    ok(&out);
    let spec = t
        .path()
        .join("etc/containerd/rdma-node-agent/base-spec.json");
    assert_eq!(fs::metadata(spec).unwrap().mode() & 0o777, 0o644);
    fs::write(t.path().join("etc/containerd/x"), "").unwrap();
    fs::set_permissions(
        t.path().join("etc/containerd/x"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let cfgfile = t.path().join("etc/rdma-node-agent/config.toml");
    fs::create_dir_all(cfgfile.parent().unwrap()).unwrap();
    fs::write(
        &cfgfile,
        "[containerd]\nbase_spec_path = \"/etc/containerd/memlock-spec.json\"\n",
    )
    .unwrap();
    fs::set_permissions(&cfgfile, fs::Permissions::from_mode(0o644)).unwrap();
    ok(&agent(t.path(), &["apply"]));
    let spec = t.path().join("etc/containerd/memlock-spec.json");
    assert_eq!(fs::metadata(spec).unwrap().mode() & 0o777, 0o600);
}

/// journal.jsonl (and the ledger, a lock) planted as a link: never written through.
#[test]
fn state_files_planted_as_links_are_not_followed() {
    let t = node("v100");
    let victim = t.path().join("etc/victim");
    fs::write(&victim, "precious\n").unwrap();
    let state = t.path().join(STATE);
    fs::create_dir_all(&state).unwrap();
    symlink("/etc/victim", state.join("journal.jsonl")).unwrap();
    fs::create_dir_all(t.path().join("run/rdma-node-agent")).unwrap();
    symlink(&victim, t.path().join("run/rdma-node-agent/agent.lock")).unwrap();
    let o = agent(t.path(), &["apply"]);
    assert_ne!(code(&o), 0, "the lock link must stop the apply");
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    fs::remove_file(t.path().join("run/rdma-node-agent/agent.lock")).unwrap();
    fs::remove_file(state.join("journal.jsonl")).unwrap();
    symlink(&victim, state.join("journal.jsonl")).unwrap();
    ok(&agent(t.path(), &["apply"]));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    // A ledger replaced by a link: refused, never read or written through.
    fs::remove_file(state.join("ledger.json")).unwrap();
    symlink(&victim, state.join("ledger.json")).unwrap();
    let o = agent(t.path(), &["revert"]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("ledger.json: it is a symbolic link"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
}

/// config.toml linked to a shadow-like file by someone besides root (a hostPath
/// pod running as a user: the link is theirs): refused, naming link and target,
/// and the target's content appears in no output. (A link only root could have
/// made is followed, as root's own choice: see `links.rs`.)
#[test]
fn a_link_to_an_unexpected_file_is_refused_without_printing_it() {
    let t = node("v100");
    fs::write(
        t.path().join("etc/shadow"),
        "root:$6$SHADOWHASH$abcdef:19000:0:99999:7:::\n",
    )
    .unwrap();
    // The drop-in the agent replaces whole (its old lines would be a diff's
    // removed lines), then containerd's config itself.
    let dropin = "etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf";
    fs::create_dir_all(t.path().join(dropin).parent().unwrap()).unwrap();
    symlink("/etc/shadow", t.path().join(dropin)).unwrap();
    lchown(t.path().join(dropin), Some(65534), Some(65534)).unwrap();
    let cfg = t.path().join(CONFIG);
    for (managed, link) in [(dropin, None), (CONFIG, Some(&cfg))] {
        if let Some(cfg) = link {
            fs::remove_file(t.path().join(dropin)).unwrap();
            fs::remove_file(cfg).unwrap();
            symlink("/etc/shadow", cfg).unwrap();
            lchown(cfg, Some(65534), Some(65534)).unwrap();
        }
        for args in [
            &["plan"][..],
            &["plan", "--json"],
            &["check", "--json"],
            &["apply"],
        ] {
            let o = agent(t.path(), args);
            let all = format!("{}{}", stdout(&o), stderr(&o));
            assert!(
                !all.contains("SHADOWHASH"),
                "{args:?} printed the target: {all}"
            );
            // The drop-in is the agent's own, written whole: a link there is
            // never followed, whoever owns it; containerd's config is the
            // admin's: a link there is followed only when root made it.
            let refused = if link.is_none() {
                all.contains("symbolic link (to /etc/shadow, owned by uid 65534)")
                    && all.contains("the agent writes whole")
            } else {
                all.contains("symbolic link to /etc/shadow")
                    && all.contains("(a link, owned by uid 65534) is not owned by root")
            };
            assert!(all.contains(managed) && refused, "{args:?}: {all}");
        }
        assert!(
            fs::read_to_string(t.path().join("etc/shadow"))
                .unwrap()
                .contains("SHADOWHASH")
        );
    }
    assert!(cfg.is_symlink());
    // A link into a config directory to something that is not a file, or
    // dangling, is refused too; so is a relative link that climbs out.
    for target in [
        "/dev/null",
        "missing.toml",
        "../../../../../../../../etc/shadow",
    ] {
        fs::remove_file(&cfg).unwrap();
        symlink(target, &cfg).unwrap();
        let o = agent(t.path(), &["plan"]);
        assert_ne!(code(&o), 0, "{target}: {}", stdout(&o));
        assert!(stderr(&o).contains("refusing"), "{target}: {}", stderr(&o));
    }
}

/// A legitimately linked config (config management) is edited at its target,
/// and revert restores the link itself, not a copy of its target.
#[test]
fn revert_restores_a_link_as_a_link() {
    let t = node("v100");
    let dir = t.path().join("etc/containerd");
    fs::create_dir_all(dir.join("managed")).unwrap();
    fs::rename(dir.join("config.toml"), dir.join("managed/config.toml")).unwrap();
    symlink("managed/config.toml", dir.join("config.toml")).unwrap();
    let before = snapshot(t.path());
    ok(&agent(t.path(), &["apply"]));
    let link = fs::symlink_metadata(dir.join("config.toml")).unwrap();
    assert!(link.file_type().is_symlink(), "apply replaced the link");
    assert!(
        fs::read_to_string(dir.join("managed/config.toml"))
            .unwrap()
            .contains("base_runtime_spec"),
        "the target was not edited"
    );
    ok(&agent(t.path(), &["revert"]));
    let link = fs::symlink_metadata(dir.join("config.toml")).unwrap();
    assert!(
        link.file_type().is_symlink(),
        "revert replaced the link by a file"
    );
    assert_eq!(
        fs::read_link(dir.join("config.toml")).unwrap(),
        Path::new("managed/config.toml")
    );
    assert_eq!(snapshot(t.path()), before);
}

/// Imports and base specs behind links (absolute ones read inside the root,
/// relative ones from the link's directory): edited at their targets, links
/// kept by apply and restored by revert (compared with lstat/readlink).
#[test]
fn linked_imports_and_base_specs_stay_links() {
    let t = node("v100");
    let c = t.path().join("etc/containerd");
    fs::create_dir_all(c.join("conf.d")).unwrap();
    fs::create_dir_all(c.join("managed")).unwrap();
    fs::create_dir_all(c.join("specs")).unwrap();
    let text = fs::read_to_string(c.join("config.toml")).unwrap().replacen(
        "version = 2\n",
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
        1,
    );
    fs::write(c.join("config.toml"), text).unwrap();
    fs::write(
        c.join("managed/nvidia.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n  base_runtime_spec = \"/etc/containerd/cri-base.json\"\n",
    )
    .unwrap();
    // An absolute link: read under --root, never the real /etc/containerd.
    symlink(
        "/etc/containerd/managed/nvidia.toml",
        c.join("conf.d/10-nvidia.toml"),
    )
    .unwrap();
    fs::write(
        c.join("specs/base.json"),
        include_str!("../../src/concerns/containerd/default-spec.json"),
    )
    .unwrap();
    symlink("specs/base.json", c.join("cri-base.json")).unwrap();
    // No containerd binary in the tree: say how its imports merge (the drop-in
    // holds a CRI table, which 1.x and 2.x read differently).
    let a = t.path().join("etc/rdma-node-agent");
    fs::create_dir_all(&a).unwrap();
    fs::write(a.join("config.toml"), "[containerd]\ndaemon_version = 2\n").unwrap();
    let before = snapshot(t.path());
    ok(&agent(t.path(), &["apply"]));
    for (link, target) in [
        (
            "conf.d/10-nvidia.toml",
            "/etc/containerd/managed/nvidia.toml",
        ),
        ("cri-base.json", "specs/base.json"),
    ] {
        let m = fs::symlink_metadata(c.join(link)).unwrap();
        assert!(m.file_type().is_symlink(), "apply replaced {link}");
        assert_eq!(fs::read_link(c.join(link)).unwrap(), Path::new(target));
    }
    assert!(
        fs::read_to_string(c.join("specs/base.json"))
            .unwrap()
            .contains("RLIMIT_MEMLOCK"),
        "the spec behind the link was not patched"
    );
    let plan = agent(t.path(), &["plan", "--exit-code"]);
    assert_eq!(code(&plan), 0, "not converged: {}", stdout(&plan));
    ok(&agent(t.path(), &["revert"]));
    assert_eq!(
        snapshot(t.path()),
        before,
        "revert did not restore links and bytes"
    );
    for link in ["conf.d/10-nvidia.toml", "cri-base.json"] {
        assert!(
            fs::symlink_metadata(c.join(link))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
