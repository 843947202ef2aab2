//! Attacks on the agent, each on a `--root` tree through the real binary: what a
//! careful admin or someone with a foothold on the node would try. Each of these
//! failed on the code before the security work (commit 65c19aa) and passes now.
//! The real-systemd side (listener, exposure) is in `tests/system_systemd.rs`.

mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use support::*;

const CONFIG: &str = "etc/containerd/config.toml";
const STATE: &str = "var/lib/rdma-node-agent";

fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap()
}

fn ok(o: &std::process::Output) -> String {
    assert_eq!(code(o), 0, "{}{}", stdout(o), stderr(o));
    stdout(o)
}

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

/// config.toml linked to a shadow-like file: refused, naming link and target,
/// and the target's content appears in no output.
#[test]
fn a_link_to_an_unexpected_file_is_refused_without_printing_it() {
    let t = node("v100");
    fs::write(
        t.path().join("etc/shadow"),
        "root:$6$SHADOWHASH$abcdef:19000:0:99999:7:::\n",
    )
    .unwrap();
    let cfg = t.path().join(CONFIG);
    fs::remove_file(&cfg).unwrap();
    symlink("/etc/shadow", &cfg).unwrap();
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
        assert!(
            all.contains("etc/containerd/config.toml")
                && all.contains("symbolic link to /etc/shadow"),
            "{args:?}: {all}"
        );
    }
    assert!(
        fs::read_to_string(t.path().join("etc/shadow"))
            .unwrap()
            .contains("SHADOWHASH")
    );
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

/// Credentials planted next to every table and file the agent edits.
const PLANTED: &[&str] = &[
    "PLANTED-password",
    "PLANTED-auth-b64",
    "PLANTED-identitytoken",
    "PLANTED-token",
    "PLANTED-header",
    "PLANTED-env",
    "PLANTED-dropin",
];

fn plant_secrets(root: &Path) {
    let cfg = root.join(CONFIG);
    let text = fs::read_to_string(&cfg).unwrap();
    // Right before and after the runtime table the agent edits, so they are
    // diff context; an inline auth table and a header array besides.
    let registry = r#"
    [plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.com".auth]
      username = "robot"
      password = "PLANTED-password"
      auth = "PLANTED-auth-b64"
      identitytoken = "PLANTED-identitytoken"
    [plugins."io.containerd.grpc.v1.cri".registry.configs."other.example.com"]
      auth = { username = "u", password = "PLANTED-password", token = "PLANTED-token" }
    [plugins."io.containerd.grpc.v1.cri".registry.headers]
      Authorization = [
        "Bearer PLANTED-header",
      ]
"#;
    // Right after the line the agent's edit follows: the lines it shows as context.
    let marker = "          runtime_type = \"io.containerd.runc.v2\"\n";
    assert!(text.contains(marker));
    // runc gets a base spec from the agent (an edit of config.toml); a second
    // handler uses the operator's spec, which the agent patches.
    let text = text.replacen(marker, &format!("{marker}{registry}"), 1)
        + r#"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          base_runtime_spec = "/etc/containerd/cri-base.json"
[plugins."io.containerd.grpc.v1.cri".registry.configs."third.example.com".auth]
  registrytoken = "PLANTED-token"
"#;
    fs::write(&cfg, text).unwrap();
    // An operator's base spec with a credential in the environment, next to rlimits.
    let spec = include_str!("../src/concerns/containerd/default-spec.json").replacen(
        "        \"rlimits\": [],",
        "        \"env\": [\"PATH=/usr/bin\", \"REGISTRY_TOKEN=PLANTED-env\"],\n        \"rlimits\": [],",
        1,
    );
    fs::write(root.join("etc/containerd/cri-base.json"), spec).unwrap();
    // A drop-in the agent replaces: its old lines are shown as removed.
    let d = root.join("etc/systemd/system/containerd.service.d");
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("50-rdma-node-agent.conf"),
        "[Service]\nEnvironment=\"REGISTRY_PASSWORD=PLANTED-dropin\"\nEnvironment=HTTP_TOKEN=PLANTED-dropin\nLimitMEMLOCK=64K\n",
    )
    .unwrap();
}

fn assert_no_secret(channel: &str, text: &str) {
    for s in PLANTED {
        assert!(!text.contains(s), "{channel} shows {s}:\n{text}");
    }
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn secrets_never_leave_the_file() {
    let t = node("v100");
    plant_secrets(t.path());
    let before = snapshot(t.path());
    for args in [
        &["plan"][..],
        &["plan", "--json"],
        &["check", "--json"],
        &["check"],
    ] {
        let o = agent(t.path(), args);
        assert_no_secret(
            &format!("{args:?}"),
            &format!("{}{}", stdout(&o), stderr(&o)),
        );
        if args[0] == "plan" {
            // The diffs are there, with the edits, and the context masked.
            let out = stdout(&o);
            assert!(
                out.contains("base_runtime_spec") && out.contains("<redacted>"),
                "{out}"
            );
        }
    }
    for args in [
        &["apply", "--json"][..],
        &["revert", "--json"],
        &["apply"],
        &["revert"],
    ] {
        let o = agent(t.path(), args);
        assert_no_secret(
            &format!("{args:?}"),
            &format!("{}{}", stdout(&o), stderr(&o)),
        );
    }
    // Nothing lost: the secrets are still in the files, byte for byte.
    assert_eq!(snapshot(t.path()), before);

    // The daemon: its logs (what journald gets) and every endpoint.
    let addr = free_addr();
    let d = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(t.path())
        .args(["serve", "--listen", &addr])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        assert!(start.elapsed().as_secs() < 20, "the daemon did not answer");
        if std::net::TcpStream::connect(&addr).is_ok() {
            let body = http_get(&addr, "/status");
            if body.contains(" 200 OK") {
                break body;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_no_secret("/status", &status);
    for p in ["/readyz", "/metrics", "/healthz"] {
        assert_no_secret(p, &http_get(&addr, p));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = d.wait_with_output().unwrap();
    assert_no_secret(
        "the daemon's log",
        &format!("{}{}", stdout_of(&out.stdout), stdout_of(&out.stderr)),
    );
    // The agent's journal holds paths and reasons only.
    let journal = fs::read_to_string(t.path().join(STATE).join("journal.jsonl")).unwrap();
    assert_no_secret("journal.jsonl", &journal);
}

fn stdout_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A syntax error in a line holding a credential: the error names the place,
/// never the value.
#[test]
fn a_broken_line_with_a_secret_is_not_quoted() {
    let t = node("v100");
    let cfg = t.path().join(CONFIG);
    let text = fs::read_to_string(&cfg).unwrap() + "password = \"PLANTED-password\" oops\n";
    fs::write(&cfg, text).unwrap();
    for args in [&["plan"][..], &["check", "--json"], &["apply"]] {
        let o = agent(t.path(), args);
        assert_no_secret(
            &format!("{args:?}"),
            &format!("{}{}", stdout(&o), stderr(&o)),
        );
    }
}

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

/// 2000 simultaneous loopback connections against a daemon whose open-files
/// limit (512) is far below `max_connections` (4096): every connection is served or answered
/// 503 and closed, none is left hanging, overload is logged a few times (not
/// every 50 ms), and a probe is answered once the flood is gone.
#[test]
fn two_thousand_connections_get_an_answer_or_a_clean_503() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    const CLIENTS: usize = 2000;
    const IDLE: usize = 1200;

    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard.min(8192), hard).unwrap();
    let t = node("v100");
    let addr = free_addr();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"));
    cmd.arg("--root")
        .arg(t.path())
        .args(["serve", "--listen", &addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| setrlimit(Resource::RLIMIT_NOFILE, 512, 512).map_err(std::io::Error::from));
    }
    let d = cmd.spawn().unwrap();
    let start = Instant::now();
    while !http_get_opt(&addr, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(start.elapsed() < Duration::from_secs(20), "no answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    // 1200 idle clients first: they fill every slot the daemon has (and more).
    let mut conns: Vec<std::net::TcpStream> = (0..IDLE)
        .map(|i| {
            std::net::TcpStream::connect(&addr)
                .unwrap_or_else(|e| panic!("connection {i} was not even accepted: {e}"))
        })
        .collect();
    // Then 800 more that ask at once, while those are still open.
    let asking: Vec<std::net::TcpStream> = (IDLE..CLIENTS)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(&addr)
                .unwrap_or_else(|e| panic!("connection {i} was not even accepted: {e}"));
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            c
        })
        .collect();
    let (mut ok, mut rejected) = (0, 0);
    for (i, mut c) in asking.into_iter().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        let r = c.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        if text.starts_with("HTTP/1.1 503") {
            rejected += 1;
        } else if text.starts_with("HTTP/1.1 200") {
            ok += 1;
        } else {
            panic!("connection {} got no answer: {r:?} {text:?}", IDLE + i);
        }
    }

    // Idle ones over the limit were told so too, not left hanging.
    let mut told = 0;
    for c in &mut conns {
        c.set_nonblocking(true).unwrap();
        let mut first = [0u8; 12];
        if c.read(&mut first).is_ok_and(|n| n > 0) {
            assert!(first.starts_with(b"HTTP/1.1 503"));
            told += 1;
        }
    }
    // Slots free up as idle clients hit the 5 s header timeout, so on a slow
    // machine a later client may be served instead: but some were over the limit.
    assert!(
        rejected + told > 0,
        "{ok} served, none over the limit was told so"
    );
    drop(conns);
    let start = Instant::now();
    while !http_get_opt(&addr, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no answer after the flood"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let log = stdout_of(&d.wait_with_output().unwrap().stderr);
    assert!(!log.contains("Too many open files"), "{log}");
    let overload = log.lines().filter(|l| l.contains("over the limit")).count();
    assert!(
        (1..=2).contains(&overload),
        "{overload} overload lines:\n{log}"
    );
    assert!(
        log.contains("does not fit the open-files limit 512"),
        "{log}"
    );
}

fn http_get_opt(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// `serve --listen unix:PATH` never removes what is not its own stale socket.
#[test]
fn a_unix_listener_removes_only_a_stale_socket() {
    let t = node("v100");
    let victim = t.path().join("etc/important");
    fs::write(&victim, "keep\n").unwrap();
    let o = agent(
        t.path(),
        &["serve", "--listen", &format!("unix:{}", victim.display())],
    );
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("a regular file is there"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
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
        include_str!("../src/concerns/containerd/default-spec.json"),
    )
    .unwrap();
    symlink("specs/base.json", c.join("cri-base.json")).unwrap();
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
