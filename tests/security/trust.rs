//! Files that decide what the agent writes must be root's alone.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::support::*;
use super::{CONFIG, STATE, code, ok};

fn write_agent_config(root: &Path, text: &str, mode: u32) -> std::path::PathBuf {
    let p = root.join("etc/rdma-node-agent/config.toml");
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// An agent config that someone besides root can change is refused, naming the
/// file, its owner and mode; its values reach no file.
#[test]
fn an_untrusted_agent_config_is_refused() {
    let t = node("v100");
    let evil = "[containerd]\nmemlock = \"12345K\"\n";
    let p = write_agent_config(t.path(), evil, 0o666);
    for args in [&["apply"][..], &["plan"], &["check", "--json"]] {
        let o = agent(t.path(), args);
        assert_ne!(code(&o), 0, "{args:?} obeyed a world-writable config");
        let e = stderr(&o);
        assert!(
            e.contains("etc/rdma-node-agent/config.toml")
                && e.contains("mode 0666")
                && e.contains("writable by others")
                && e.contains("uid 0"),
            "{e}"
        );
    }
    // Owned by an ordinary user, or in a directory others can write: the same.
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&p, Some(1000), Some(1000)).unwrap();
    let e = stderr(&agent(t.path(), &["apply"]));
    assert!(
        e.contains("uid 1000") && e.contains("not owned by root"),
        "{e}"
    );
    std::os::unix::fs::chown(&p, Some(0), Some(0)).unwrap();
    fs::set_permissions(p.parent().unwrap(), fs::Permissions::from_mode(0o777)).unwrap();
    let e = stderr(&agent(t.path(), &["apply"]));
    assert!(e.contains("etc/rdma-node-agent (the agent config)"), "{e}");
    let all: String = snapshot(t.path())
        .values()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert!(
        !all.contains("12641280"),
        "the memlock of an untrusted config reached a file"
    );
    // Fixed by the admin: obeyed.
    fs::set_permissions(p.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
    ok(&agent(t.path(), &["apply"]));
}

/// containerd's config names the files the agent writes: a group-writable one
/// (or import, or base spec) is refused as well, and nothing is written.
#[test]
fn untrusted_files_that_decide_the_writes_are_refused() {
    let t = node("v100");
    let cfg = t.path().join(CONFIG);
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o664)).unwrap();
    let before = snapshot(t.path());
    let o = agent(t.path(), &["apply"]);
    assert_ne!(code(&o), 0);
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        all.contains("a containerd config file") && all.contains("writable by its group"),
        "{all}"
    );
    assert_eq!(snapshot(t.path()), before);
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o644)).unwrap();
    // The state that decides what revert writes back: a ledger others could write.
    ok(&agent(t.path(), &["apply"]));
    let ledger = t.path().join(STATE).join("ledger.json");
    fs::set_permissions(&ledger, fs::Permissions::from_mode(0o646)).unwrap();
    let o = agent(t.path(), &["revert"]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("ledger.json (the agent's state)"),
        "{}",
        stderr(&o)
    );
}
