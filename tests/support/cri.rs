//! A real containerd for tests: its own config, root, state and socket in a temp
//! dir, started in a private mount namespace where the test root's
//! /etc/containerd is bind-mounted over the host's (so absolute paths the agent
//! writes into config.toml resolve), with a soft memlock of 64 KiB. Driven over
//! CRI from Rust. Pods, shims, containers and containerd are cleaned up by PID,
//! also on panic.

use std::fs;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint, Uri};

pub const BUSYBOX_IMAGE: &str = "localhost/test/busybox:1";
pub const PAUSE_IMAGE: &str = "localhost/test/pause:1";
const IMAGE_CACHE: &str = "/var/cache/rdma-node-agent/test-images";
// Every wait on containerd is bounded: a hung daemon fails the test, never stalls it.
// RDMA_AGENT_TIMEOUT_SCALE stretches them all, for the VM tier's guest (TCG, one vCPU).
fn scaled(secs: u64) -> Duration {
    let scale = std::env::var("RDMA_AGENT_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    Duration::from_secs(secs * scale)
}
fn cri_timeout() -> Duration {
    scaled(30)
}
fn start_timeout() -> Duration {
    scaled(20)
}
fn exit_timeout() -> Duration {
    scaled(20)
}
fn stop_timeout() -> Duration {
    scaled(10)
}
/// kubelet's cgroupfs layout for best-effort pods; `pods.memlock` looks for `kubepods`.
const POD_CGROUPS: &str = "kubepods/besteffort";

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when the ELF file has a PT_INTERP program header (a dynamic executable).
fn is_dynamic_elf(bytes: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 {
        return false;
    }
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let o = phoff + i * size;
        bytes.get(o..o + 4) == Some(&3u32.to_le_bytes()[..])
    })
}

/// The static busybox the images are made of: /bin/busybox (busybox-static), or
/// RDMA_AGENT_BUSYBOX (the VM tier's guest gets the host's in its payload).
fn busybox_path() -> PathBuf {
    std::env::var_os("RDMA_AGENT_BUSYBOX")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/bin/busybox".into())
}

/// Fails loudly when a real-component prerequisite is missing: these tests are
/// only run on purpose (`--include-ignored`), so a missing tool is an error.
pub fn require_root_and_tools() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the real-containerd tests need root"
    );
    for tool in [
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "runc",
        "unshare",
        "tar",
    ] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} is not installed: run scripts/test.sh"
        );
    }
    let path = busybox_path();
    let busybox = fs::read(&path)
        .unwrap_or_else(|e| panic!("{} ({e}): install busybox-static", path.display()));
    // A dynamic busybox would need a libc in the image: containers would fail to exec.
    assert!(
        !is_dynamic_elf(&busybox),
        "{} is dynamically linked: install busybox-static",
        path.display()
    );
}

/// A tar of `dir` whose bytes depend only on the content: names sorted, times,
/// owners fixed; `mode` (chmod syntax) overrides the modes when given.
fn deterministic_tar(dir: &Path, out: &Path, mode: Option<&str>) {
    let mut tar = Command::new("tar");
    tar.args([
        "--sort=name",
        "--mtime=@0",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
    ]);
    if let Some(mode) = mode {
        tar.arg(format!("--mode={mode}"));
    }
    run(tar.arg("-C").arg(dir).arg("-cf").arg(out).arg("."));
}

/// Creates `rel` under `root`, each new level with mode 0755 whatever the umask.
fn mkdirs(root: &Path, rel: &Path) {
    let mut p = root.to_owned();
    for part in rel.components() {
        p.push(part);
        if !p.exists() {
            fs::create_dir(&p).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}

/// docker-archive tarballs of a busybox image and a pause image, built once per
/// busybox binary and cached outside the checkout.
pub fn images() -> (PathBuf, PathBuf) {
    let busybox = fs::read(busybox_path()).expect("busybox-static");
    let dir = Path::new(IMAGE_CACHE).join(&sha256_hex(&busybox)[..16]);
    let (bb, pause) = (dir.join("busybox.tar"), dir.join("pause.tar"));
    // Tests of one binary run in parallel threads: one builds, the others wait.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if bb.exists() && pause.exists() {
        return (bb, pause);
    }
    fs::create_dir_all(IMAGE_CACHE).unwrap();
    let work = tempfile::tempdir_in(IMAGE_CACHE).unwrap();
    let rootfs = work.path().join("rootfs");
    for (d, mode) in [
        ("bin", 0o755),
        ("proc", 0o755),
        ("sys", 0o755),
        ("dev", 0o755),
        ("etc", 0o755),
        ("root", 0o700),
        ("tmp", 0o1777),
    ] {
        let p = rootfs.join(d);
        fs::create_dir_all(&p).unwrap();
        // Explicit modes: the layer (and so its digest) must not depend on the umask.
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::set_permissions(&rootfs, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(rootfs.join("bin/busybox"), &busybox).unwrap();
    fs::set_permissions(
        rootfs.join("bin/busybox"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // `--list-full` gives each applet's path (bin/, sbin/, usr/bin/, usr/sbin/).
    for applet in run(Command::new(busybox_path()).arg("--list-full")).lines() {
        let p = rootfs.join(applet);
        if p.exists() {
            continue;
        }
        mkdirs(&rootfs, Path::new(applet).parent().unwrap());
        symlink("/bin/busybox", &p).unwrap();
    }
    let layer = work.path().join("layer.tar");
    // The rootfs has explicit modes (/tmp 1777, /root 0700): keep them.
    deterministic_tar(&rootfs, &layer, None);
    let layer_sha = sha256_hex(&fs::read(&layer).unwrap());
    fs::create_dir_all(&dir).unwrap();
    for (name, entrypoint, out) in [
        (BUSYBOX_IMAGE, vec!["sh"], &bb),
        (PAUSE_IMAGE, vec!["sleep", "2147483647"], &pause),
    ] {
        let a = work.path().join(name.replace(['/', ':'], "_"));
        fs::create_dir_all(a.join(&layer_sha)).unwrap();
        fs::copy(&layer, a.join(&layer_sha).join("layer.tar")).unwrap();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_sha}")]},
        }))
        .unwrap();
        let config_sha = sha256_hex(&config);
        fs::write(a.join(format!("{config_sha}.json")), &config).unwrap();
        let manifest = serde_json::json!([{
            "Config": format!("{config_sha}.json"),
            "RepoTags": [name],
            "Layers": [format!("{layer_sha}/layer.tar")],
        }]);
        fs::write(a.join("manifest.json"), manifest.to_string()).unwrap();
        // A name of its own, so another test binary building at once never shares it.
        let tmp = tempfile::Builder::new()
            .prefix(".image")
            .tempfile_in(&dir)
            .unwrap()
            .into_temp_path();
        // Metadata files and the layer blob: plain 0644/0755, whatever the umask.
        deterministic_tar(&a, &tmp, Some("u=rwX,go=rX"));
        // Renamed into place whole, so a parallel test never reads half an image.
        tmp.persist(out).unwrap();
    }
    (bb, pause)
}

/// The config.toml the tests start from: two runc handlers, `runc` (managed by
/// the agent) and `control` (left alone), host-network pods, nothing external.
pub fn config_toml(dir: &Path) -> String {
    format!(
        r#"# containerd for rdma-node-agent's real-containerd test
version = 2
root = "{root}"
state = "{state}"
required_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{sock}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  # Pods use the host network: CNI gets empty dirs, nothing from the host.
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{dir}/cni/bin"
    conf_dir = "{dir}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.control]
      runtime_type = "io.containerd.runc.v2"
"#,
        root = dir.join("lib").display(),
        state = dir.join("run").display(),
        sock = dir.join("containerd.sock").display(),
        dir = dir.display(),
    )
}

/// containerd 2.x's NRI section, on as it is by default, its socket at `socket`
/// (a host path: the test's tree, not /run/nri).
pub fn nri_toml(socket: &Path) -> String {
    format!(
        "\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  socket_path = \"{}\"\n",
        socket.display()
    )
}

/// A gRPC channel to containerd's socket.
async fn channel(sock: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://[::]")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = sock.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(sock).await?,
                ))
            }
        }))
        .await
}

/// A container kept running, as a pod that predates a change.
pub struct Running {
    pub pod: String,
    pub id: String,
    pub pid: u32,
    /// CRI's verbose info: `runtimeSpec`, `pid`, `sandboxID`, …
    pub info: Value,
}

pub struct Containerd {
    /// Holds the host root the agent works on (`root/`) and containerd's dirs.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    rt: tokio::runtime::Runtime,
    client: Option<RuntimeServiceClient<Channel>>,
    /// Images live in containerd's root, which a restart keeps.
    imported: bool,
    /// Pod uids given out, each naming a cgroup `kubepods/besteffort/pod<uid>`.
    pod_uids: Vec<String>,
    /// The config containerd is started with (`--config`), a host path.
    config: String,
    /// The containerd binary (default: the one on PATH).
    binary: PathBuf,
    /// The socket of a containerd this instance did not start (`attach`): the
    /// node's, run by its systemd unit, which this instance never stops.
    attached: Option<PathBuf>,
}

impl Containerd {
    /// A host root with containerd's config, ready for the agent; not started.
    pub fn new() -> Containerd {
        require_root_and_tools();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("etc/containerd")).unwrap();
        fs::write(
            root.join("etc/containerd/config.toml"),
            config_toml(dir.path()),
        )
        .unwrap();
        // The agent reads processes under the root: let it see the real ones.
        symlink("/proc", root.join("proc")).unwrap();
        Containerd {
            dir,
            child: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            client: None,
            imported: false,
            pod_uids: Vec::new(),
            config: "/etc/containerd/config.toml".into(),
            binary: "containerd".into(),
            attached: None,
        }
    }

    /// A client of the containerd already serving CRI on `socket` (a node's,
    /// run by its unit), once it answers, with the test images imported. Its
    /// pods are removed on drop; the daemon and its shims are left running.
    pub fn attach(socket: &Path) -> Containerd {
        let mut c = Containerd::new();
        c.attached = Some(socket.to_owned());
        c.connect_and_import();
        c
    }

    /// Like `new`, run with another containerd binary (e.g. 2.1 from the cache).
    pub fn with_binary(binary: &Path) -> Containerd {
        let mut c = Containerd::new();
        c.binary = binary.to_owned();
        c
    }

    /// Like `new`, with containerd's config at another path (as a unit passing
    /// `--config` has it): moved there in the tree, and bind-mounted there too.
    pub fn with_config_at(config: &str) -> Containerd {
        let mut c = Containerd::new();
        let from = c.root().join("etc/containerd/config.toml");
        let to = c.root().join(config.trim_start_matches('/'));
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::rename(from, to).unwrap();
        c.config = config.to_owned();
        c
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// containerd's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn socket(&self) -> PathBuf {
        match &self.attached {
            Some(s) => s.clone(),
            None => self.dir.path().join("containerd.sock"),
        }
    }

    /// Unique per instance, so parallel tests never share a pod cgroup.
    fn instance(&self) -> String {
        let name = self.dir.path().file_name().unwrap().to_string_lossy();
        name.trim_start_matches('.').to_owned()
    }

    pub fn start(&mut self) {
        // The bind mount target must exist on the host; the package ships it.
        fs::create_dir_all("/etc/containerd").unwrap();
        let _ = fs::remove_file(self.socket());
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("containerd.log"))
            .unwrap();
        // A config elsewhere gets its directory mounted from the tree too.
        let dir = Path::new(&self.config).parent().unwrap().to_owned();
        let extra = if dir == Path::new("/etc/containerd") {
            String::new()
        } else {
            fs::create_dir_all(&dir).unwrap();
            format!(
                "mount --bind {} {} && ",
                self.root().join(dir.strip_prefix("/").unwrap()).display(),
                dir.display()
            )
        };
        let script = format!(
            "mount --bind {etc} /etc/containerd && {extra}ulimit -S -l 64 && exec {binary} --config {config}",
            etc = self.root().join("etc/containerd").display(),
            config = self.config,
            binary = self.binary.display(),
        );
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        if self.cri_off() {
            return;
        }
        self.connect_and_import();
    }

    /// Waits for CRI to answer (and the child, if any, to stay up), then
    /// imports the test images once.
    fn connect_and_import(&mut self) {
        let start = Instant::now();
        let client = loop {
            if let Some(c) = self.try_connect() {
                break c;
            }
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait().unwrap(),
                None => None,
            };
            if let Some(status) = exited {
                self.child = None;
                panic!("containerd exited ({status}):\n{}", self.log_tail());
            }
            if start.elapsed() > start_timeout() {
                panic!(
                    "containerd's CRI was not ready within {:?}:\n{}",
                    start_timeout(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.client = Some(client);
        if !self.imported {
            let (bb, pause) = images();
            for image in [bb, pause] {
                run(Command::new("ctr")
                    .arg("--address")
                    .arg(self.socket())
                    .args(["-n", "k8s.io", "images", "import"])
                    .arg(image));
            }
            self.imported = true;
        }
    }

    /// The tree's config turns CRI off (`disabled_plugins`): no CRI client.
    fn cri_off(&self) -> bool {
        fs::read_to_string(self.root().join(self.config.trim_start_matches('/'))).is_ok_and(|t| {
            t.lines()
                .any(|l| l.starts_with("disabled_plugins") && l.contains("cri"))
        })
    }

    /// With CRI off: once containerd answers on its socket (`ctr version`), what
    /// a CRI client gets when it asks to run a pod.
    pub fn run_pod_without_cri(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let ok = Command::new("ctr")
                .arg("--address")
                .arg(self.socket())
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                break;
            }
            assert!(
                start.elapsed() < start_timeout(),
                "containerd did not answer:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let sock = self.socket();
        let (config, _) = self.sandbox_config("no-cri");
        self.rt.block_on(async {
            let channel = channel(sock).await.map_err(|e| e.to_string())?;
            RuntimeServiceClient::new(channel)
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
                .map(|_| ())
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
        })
    }

    /// The end of containerd's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- containerd log (last 30 lines) ---\n{tail}")
    }

    /// A client once CRI answers `Version` and `Status` says the runtime is ready.
    fn try_connect(&self) -> Option<RuntimeServiceClient<Channel>> {
        if !self.socket().exists() {
            return None;
        }
        let sock = self.socket();
        self.rt.block_on(async {
            let channel = channel(sock).await.ok()?;
            let mut c = RuntimeServiceClient::new(channel);
            let ask = async {
                c.version(VersionRequest::default()).await.ok()?;
                c.status(StatusRequest { verbose: false }).await.ok()
            };
            let status = tokio::time::timeout(Duration::from_secs(2), ask)
                .await
                .ok()??
                .into_inner()
                .status?;
            // NetworkReady stays false (no CNI): host-network pods do not need it.
            status
                .conditions
                .iter()
                .any(|c| c.r#type == "RuntimeReady" && c.status)
                .then_some(c)
        })
    }

    fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone().expect("containerd is started")
    }

    /// One CRI call, bounded; a failure panics with containerd's log.
    fn call<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> T {
        match self
            .rt
            .block_on(async { tokio::time::timeout(cri_timeout(), fut).await })
        {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) => panic!("{what}: {s}\n{}", self.log_tail()),
            Err(_) => panic!(
                "{what}: no answer within {:?}\n{}",
                cri_timeout(),
                self.log_tail()
            ),
        }
    }

    /// Stops containerd by PID (its shims and containers keep running, as with
    /// systemd's KillMode=process) and starts it again on the same root.
    pub fn restart(&mut self) {
        self.stop_daemon();
        self.start();
    }

    fn stop_daemon(&mut self) {
        self.client = None;
        if let Some(mut c) = self.child.take() {
            // `unshare` exec'd sh which exec'd containerd: the child PID is containerd.
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() {
                if start.elapsed() > stop_timeout() {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn sandbox_config(&self, name: &str) -> (PodSandboxConfig, String) {
        let uid = format!("{name}-{}", self.instance());
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: "rdma-test".into(),
                attempt: 0,
            }),
            // Host-network pods share the host's UTS namespace: no hostname of their own.
            hostname: String::new(),
            log_directory: self.log_dir(name).to_string_lossy().into(),
            linux: Some(LinuxPodSandboxConfig {
                // Like kubelet's cgroupfs layout, so pods.memlock finds the processes.
                cgroup_parent: format!("/{POD_CGROUPS}/pod{uid}"),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Node as i32,
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        (config, uid)
    }

    fn log_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(name)
    }

    /// Runs a pod with one container on `handler`; returns (pod id, container id).
    /// The container is created, and started unless `start` is false.
    pub fn container(
        &mut self,
        name: &str,
        handler: &str,
        script: &str,
        start: bool,
    ) -> (String, String) {
        self.container_with(name, handler, script, start, |_| {})
    }

    /// Like `container`, with the container's config edited first (devices,
    /// capabilities, …).
    pub fn container_with(
        &mut self,
        name: &str,
        handler: &str,
        script: &str,
        start: bool,
        edit: impl FnOnce(&mut ContainerConfig),
    ) -> (String, String) {
        let (config, uid) = self.sandbox_config(name);
        self.pod_uids.push(uid);
        let mut container_config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: BUSYBOX_IMAGE.into(),
                ..Default::default()
            }),
            command: vec!["sh".into(), "-c".into(), script.into()],
            log_path: format!("{name}.log"),
            ..Default::default()
        };
        edit(&mut container_config);
        let mut c = self.client();
        let pod = self
            .call(
                &format!("RunPodSandbox {name} on {handler}"),
                c.run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: handler.into(),
                }),
            )
            .pod_sandbox_id;
        let id = self
            .call(
                &format!("CreateContainer {name} on {handler}"),
                c.create_container(CreateContainerRequest {
                    pod_sandbox_id: pod.clone(),
                    config: Some(container_config),
                    sandbox_config: Some(config),
                }),
            )
            .container_id;
        if start {
            self.call(
                &format!("StartContainer {name} on {handler}"),
                c.start_container(StartContainerRequest {
                    container_id: id.clone(),
                }),
            );
        }
        (pod, id)
    }

    /// Runs `script` in a new container on `handler`, waits for it to exit 0 and
    /// returns its stdout.
    pub fn output(&mut self, name: &str, handler: &str, script: &str) -> String {
        let (_, id) = self.container(name, handler, script, true);
        let (code, log) = self.wait_exit(name, &id, exit_timeout());
        assert_eq!(code, 0, "{name} on {handler} exited {code}:\n{log}");
        cri_log_stream(&log, "stdout")
    }

    /// Waits up to `limit` for container `id` (named `name`) to exit; its exit
    /// code and its CRI log as containerd wrote it.
    pub fn wait_exit(&mut self, name: &str, id: &str, limit: Duration) -> (i32, String) {
        let start = Instant::now();
        let status = loop {
            let (s, _) = self.status(id);
            if s.state == ContainerState::ContainerExited as i32 {
                break s;
            }
            assert!(
                start.elapsed() < limit,
                "{name} did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let log = self.log_dir(name).join(format!("{name}.log"));
        let log = fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        (status.exit_code, log)
    }

    /// Starts a container running `script` on `handler` and returns it once it runs.
    pub fn running(&mut self, name: &str, handler: &str, script: &str) -> Running {
        self.running_with(name, handler, script, |_| {})
    }

    /// Like `running`, with the container's config edited first.
    pub fn running_with(
        &mut self,
        name: &str,
        handler: &str,
        script: &str,
        edit: impl FnOnce(&mut ContainerConfig),
    ) -> Running {
        let (pod, id) = self.container_with(name, handler, script, true, edit);
        let start = Instant::now();
        loop {
            let (s, info) = self.status(&id);
            let pid = info["pid"].as_u64().unwrap_or(0);
            if s.state == ContainerState::ContainerRunning as i32 && pid > 0 {
                return Running {
                    pod,
                    id,
                    pid: pid as u32,
                    info,
                };
            }
            assert!(
                s.state != ContainerState::ContainerExited as i32,
                "{name} exited ({}) instead of running",
                s.exit_code
            );
            assert!(
                start.elapsed() < exit_timeout(),
                "{name} did not run within {:?}",
                exit_timeout()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The OCI spec CRI hands to runc for a new container on `handler` (created,
    /// not started), with the ids, names and pids that differ between any two
    /// containers replaced by placeholders, so two specs can be compared.
    /// CRI `Status` with `verbose`, read by this test's own client (k8s-cri):
    /// the CRI plugin's effective config, `info["config"]`.
    pub fn status_config(&mut self) -> String {
        let c = self.client.as_mut().expect("containerd started");
        self.rt
            .block_on(c.status(StatusRequest { verbose: true }))
            .expect("CRI Status")
            .into_inner()
            .info
            .remove("config")
            .expect("a config in verbose Status")
    }

    pub fn spec(&mut self, name: &str, handler: &str) -> Value {
        let (pod, id) = self.container(name, handler, "true", false);
        let (_, info) = self.status(&id);
        let uid = format!("{name}-{}", self.instance());
        let text = info["runtimeSpec"]
            .to_string()
            .replace(&id, "<container-id>")
            .replace(&pod, "<pod-id>")
            .replace(&uid, "<pod-uid>");
        let mut spec: Value = serde_json::from_str(&text).unwrap();
        for key in [
            "io.kubernetes.cri.container-name",
            "io.kubernetes.cri.sandbox-name",
        ] {
            if let Some(v) = spec["annotations"].get_mut(key) {
                assert_eq!(v, name);
                *v = Value::from("<name>");
            }
        }
        // Joined namespaces are those of the sandbox's pause process.
        if let Some(nss) = spec["linux"]["namespaces"].as_array_mut() {
            for ns in nss {
                if ns.get("path").is_some() {
                    let path = format!("/proc/<sandbox>/ns/{}", ns["type"].as_str().unwrap());
                    ns["path"] = Value::from(path);
                }
            }
        }
        spec
    }

    /// The container's CRI status and verbose info (`runtimeSpec`, `pid`, …).
    pub fn status(&mut self, id: &str) -> (ContainerStatus, Value) {
        let mut c = self.client();
        let r = self.call(
            &format!("ContainerStatus {id}"),
            c.container_status(ContainerStatusRequest {
                container_id: id.into(),
                verbose: true,
            }),
        );
        let info = r
            .info
            .get("info")
            .map(|s| serde_json::from_str(s).unwrap())
            .unwrap_or(Value::Null);
        (r.status.expect("a container status"), info)
    }

    /// Stops and removes every pod of this containerd (each call bounded), best effort.
    fn remove_all_pods(&mut self) {
        let Some(mut c) = self.client.clone() else {
            return;
        };
        self.rt.block_on(async {
            let list = c.list_pod_sandbox(ListPodSandboxRequest { filter: None });
            let Ok(Ok(list)) = tokio::time::timeout(cri_timeout(), list).await else {
                return;
            };
            for pod in list.into_inner().items {
                let stop = StopPodSandboxRequest {
                    pod_sandbox_id: pod.id.clone(),
                };
                let _ = tokio::time::timeout(cri_timeout(), c.stop_pod_sandbox(stop)).await;
                let remove = RemovePodSandboxRequest {
                    pod_sandbox_id: pod.id,
                };
                let _ = tokio::time::timeout(cri_timeout(), c.remove_pod_sandbox(remove)).await;
            }
        });
    }

    /// Ends the shims of this instance (named by our socket in their arguments).
    fn kill_shims(&self) {
        let sock = self.socket().into_os_string().into_encoded_bytes();
        for pid in all_pids() {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_shim = args.first().is_some_and(|a| {
                Path::new(std::ffi::OsStr::from_bytes(a))
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("containerd-shim"))
            });
            let ours = args
                .windows(2)
                .any(|w| w[0] == b"-address" && w[1] == sock.as_slice());
            if is_shim && ours {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    /// Kills what is left in this instance's pod cgroups (containers orphaned by a
    /// dead containerd) and removes those cgroups, in every hierarchy.
    fn sweep_pod_cgroups(&self) {
        let hierarchies: Vec<PathBuf> = fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join(POD_CGROUPS))
            .filter(|p| p.is_dir())
            .collect();
        for uid in &self.pod_uids {
            for h in &hierarchies {
                let pod = h.join(format!("pod{uid}"));
                if !pod.is_dir() {
                    continue;
                }
                let start = Instant::now();
                loop {
                    let pids = cgroup_pids(&pod);
                    if pids.is_empty() || start.elapsed() > stop_timeout() {
                        break;
                    }
                    for pid in pids {
                        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                remove_cgroup(&pod);
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.remove_all_pods();
        if self.attached.is_some() {
            // The node's containerd and its shims are its unit's, not ours.
            self.sweep_pod_cgroups();
            return;
        }
        self.stop_daemon();
        // Shims outlive containerd by design: end the ones of this instance.
        self.kill_shims();
        self.sweep_pod_cgroups();
    }
}

/// The text of one stream (`stdout`/`stderr`) of a CRI log, whose lines are
/// `<time> <stream> <F|P> <text>` (P: a partial line continued by the next).
pub fn cri_log_stream(log: &str, stream: &str) -> String {
    let mut out = String::new();
    for line in log.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_, s, tag, text) = (parts.next(), parts.next(), parts.next(), parts.next());
        if s != Some(stream) {
            continue;
        }
        out.push_str(text.unwrap_or(""));
        if tag == Some("F") {
            out.push('\n');
        }
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

/// The paths where two JSON values differ, with both values, e.g.
/// `process.rlimits: [..] vs null`.
pub fn json_diff(a: &Value, b: &Value) -> Vec<String> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        let at = |k: &str| {
            if path.is_empty() {
                k.to_owned()
            } else {
                format!("{path}.{k}")
            }
        };
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    let null = Value::Null;
                    walk(
                        &at(k),
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (u, v)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), u, v, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {a} vs {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", a, b, &mut out);
    out
}

fn all_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect()
}

/// Every process in a cgroup and its descendants.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(cgroup_pids(&e.path()));
        }
    }
    pids
}

/// rmdir a cgroup, children first (cgroup dirs hold only kernel files).
fn remove_cgroup(dir: &Path) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup(&e.path());
        }
    }
    let _ = fs::remove_dir(dir);
}
