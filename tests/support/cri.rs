//! A real containerd for tests: its own config, root, state and socket in a temp
//! dir, started in a private mount namespace where the test root's
//! /etc/containerd is bind-mounted over the host's (so absolute paths the agent
//! writes into config.toml resolve), with a soft memlock of 64 KiB. Driven over
//! CRI from Rust. Pods, shims and containerd are cleaned up by PID, also on panic.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint, Uri};

pub const BUSYBOX_IMAGE: &str = "localhost/test/busybox:1";
pub const PAUSE_IMAGE: &str = "localhost/test/pause:1";
const IMAGE_CACHE: &str = "/var/cache/rdma-node-agent/test-images";

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

/// Fails loudly when a real-component prerequisite is missing.
pub fn require_root_and_tools() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the real-containerd tests need root"
    );
    for tool in ["containerd", "ctr", "runc", "unshare", "tar"] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} is not installed: run scripts/test.sh"
        );
    }
    assert!(
        Path::new("/bin/busybox").exists(),
        "busybox-static is not installed: run scripts/test.sh"
    );
}

/// docker-archive tarballs of a busybox image and a pause image, built once per
/// busybox binary and cached outside the checkout.
pub fn images() -> (PathBuf, PathBuf) {
    let busybox = fs::read("/bin/busybox").expect("busybox-static");
    let dir = Path::new(IMAGE_CACHE).join(&sha256_hex(&busybox)[..16]);
    let (bb, pause) = (dir.join("busybox.tar"), dir.join("pause.tar"));
    if bb.exists() && pause.exists() {
        return (bb, pause);
    }
    fs::create_dir_all(IMAGE_CACHE).unwrap();
    let work = tempfile::tempdir_in(IMAGE_CACHE).unwrap();
    let rootfs = work.path().join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).unwrap();
    fs::write(rootfs.join("bin/busybox"), &busybox).unwrap();
    run(Command::new("chmod")
        .args(["0755"])
        .arg(rootfs.join("bin/busybox")));
    for applet in run(Command::new("/bin/busybox").arg("--list-full")).lines() {
        let p = rootfs.join(applet);
        if p.exists() {
            continue;
        }
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink("/bin/busybox", &p).unwrap();
    }
    for d in ["proc", "sys", "dev", "tmp", "etc", "root"] {
        fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    let layer = work.path().join("layer.tar");
    run(Command::new("tar")
        .args([
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
        ])
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("."));
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
        let tmp = dir.join(format!(
            ".{}.tmp{}",
            out.file_name().unwrap().to_string_lossy(),
            std::process::id()
        ));
        run(Command::new("tar")
            .args([
                "--sort=name",
                "--mtime=@0",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "-C",
            ])
            .arg(&a)
            .arg("-cf")
            .arg(&tmp)
            .arg("."));
        // Renamed into place whole, so a parallel test never reads half an image.
        fs::rename(&tmp, out).unwrap();
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

pub struct Containerd {
    /// Holds the host root the agent works on (`root/`) and containerd's dirs.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    pub rt: tokio::runtime::Runtime,
    client: Option<RuntimeServiceClient<Channel>>,
    pods: Vec<String>,
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
            pods: Vec::new(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    pub fn start(&mut self) {
        // The bind mount target must exist on the host; the package ships it.
        fs::create_dir_all("/etc/containerd").unwrap();
        let _ = fs::remove_file(self.socket());
        let log = fs::File::create(self.dir.path().join("containerd.log")).unwrap();
        let script = format!(
            "mount --bind {etc} /etc/containerd && ulimit -S -l 64 && exec containerd --config /etc/containerd/config.toml",
            etc = self.root().join("etc/containerd").display()
        );
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        let client = loop {
            if let Some(c) = self.try_connect() {
                break c;
            }
            if start.elapsed() > Duration::from_secs(20) {
                panic!("containerd did not answer CRI within 20 s:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        self.client = Some(client);
        let (bb, pause) = images();
        for image in [bb, pause] {
            run(Command::new("ctr")
                .arg("--address")
                .arg(self.socket())
                .args(["-n", "k8s.io", "images", "import"])
                .arg(image));
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn try_connect(&self) -> Option<RuntimeServiceClient<Channel>> {
        if !self.socket().exists() {
            return None;
        }
        let sock = self.socket();
        self.rt.block_on(async {
            let channel = Endpoint::try_from("http://[::]")
                .ok()?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let sock = sock.clone();
                    async move {
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                            tokio::net::UnixStream::connect(sock).await?,
                        ))
                    }
                }))
                .await
                .ok()?;
            let mut c = RuntimeServiceClient::new(channel);
            c.version(VersionRequest::default()).await.ok()?;
            Some(c)
        })
    }

    fn client(&mut self) -> RuntimeServiceClient<Channel> {
        self.client.clone().expect("containerd is started")
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
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    pub fn sandbox_config(&self, name: &str) -> PodSandboxConfig {
        let uid = format!("{name}-{}", std::process::id());
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: "rdma-test".into(),
                attempt: 0,
            }),
            // Host-network pods share the host's UTS namespace: no hostname of their own.
            hostname: String::new(),
            log_directory: self
                .dir
                .path()
                .join("logs")
                .join(name)
                .to_string_lossy()
                .into(),
            linux: Some(LinuxPodSandboxConfig {
                // Like kubelet's cgroupfs layout, so pods.memlock finds the processes.
                cgroup_parent: format!("/kubepods/besteffort/pod{uid}"),
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
        }
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
        let config = self.sandbox_config(name);
        let mut c = self.client();
        let pod = self
            .rt
            .block_on(c.run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.into(),
            }))
            .unwrap_or_else(|e| panic!("RunPodSandbox on {handler}: {e}\n{}", self.log()))
            .into_inner()
            .pod_sandbox_id;
        self.pods.push(pod.clone());
        let created = self.rt.block_on(c.create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(ContainerConfig {
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
            }),
            sandbox_config: Some(config),
        }));
        let id = created
            .unwrap_or_else(|e| panic!("CreateContainer on {handler}: {e}\n{}", self.log()))
            .into_inner()
            .container_id;
        if start {
            self.rt
                .block_on(c.start_container(StartContainerRequest {
                    container_id: id.clone(),
                }))
                .unwrap_or_else(|e| panic!("StartContainer on {handler}: {e}\n{}", self.log()));
        }
        (pod, id)
    }

    /// Runs `script` in a new container on `handler` and returns what it printed.
    pub fn output(&mut self, name: &str, handler: &str, script: &str) -> String {
        let (_, id) = self.container(name, handler, script, true);
        let start = Instant::now();
        loop {
            let s = self.status(&id);
            if s.0 == ContainerState::ContainerExited as i32 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{name} did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = self
            .dir
            .path()
            .join("logs")
            .join(name)
            .join(format!("{name}.log"));
        // CRI log lines: "<time> stdout F <text>".
        fs::read_to_string(&log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
            .lines()
            .filter_map(|l| l.splitn(4, ' ').nth(3))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The container's state and CRI's verbose info (which holds `runtimeSpec` and `pid`).
    pub fn status(&mut self, id: &str) -> (i32, serde_json::Value) {
        let mut c = self.client();
        let r = self
            .rt
            .block_on(c.container_status(ContainerStatusRequest {
                container_id: id.into(),
                verbose: true,
            }))
            .unwrap()
            .into_inner();
        let info: HashMap<String, String> = r.info;
        let info = info
            .get("info")
            .map(|s| serde_json::from_str(s).unwrap())
            .unwrap_or(serde_json::Value::Null);
        (r.status.map_or(-1, |s| s.state), info)
    }

    fn remove_pods(&mut self) {
        let Some(mut c) = self.client.clone() else {
            return;
        };
        for pod in std::mem::take(&mut self.pods) {
            let _ = self.rt.block_on(c.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: pod.clone(),
            }));
            let _ = self
                .rt
                .block_on(c.remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: pod,
                }));
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.remove_pods();
        self.stop_daemon();
        // Shims outlive containerd by design: end the ones of this instance.
        let sock = self.socket().to_string_lossy().into_owned();
        for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.starts_with("/usr/bin/containerd-shim") && cmdline.contains(&sock) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}
