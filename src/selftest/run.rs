//! The real runner: `ib_write_bw` server and client as child processes, each
//! started through util-linux's `prlimit` (the rlimits of the base spec) and,
//! when the agent runs as root, `setpriv` dropping CAP_IPC_LOCK from the
//! bounding and inheritable sets (container runtimes do not grant it, and with
//! it the kernel ignores RLIMIT_MEMLOCK).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{RunOutput, Runner, Target};
use crate::host::limit::Limit;

/// perftest's iterations on a software device (its default is 5000).
const SOFTWARE_ITERS: &str = "100";

pub struct Perftest {
    pub binary: PathBuf,
    pub prlimit: PathBuf,
    /// `setpriv`, when the agent runs as root and must drop CAP_IPC_LOCK.
    pub setpriv: Option<PathBuf>,
    /// Other rlimits of the base spec, as prlimit options (`nofile`, `RLIMIT_NOFILE`'s).
    pub rlimits: Vec<(String, Limit)>,
    /// How long one side may take.
    pub timeout: Duration,
}

/// `unlimited` or a byte count, as prlimit takes them.
fn value(l: Limit) -> String {
    if l.is_unlimited() {
        "unlimited".to_owned()
    } else {
        l.0.to_string()
    }
}

/// A child whose stdout and stderr are gathered into one text as they come.
struct Side {
    child: Child,
    text: Arc<Mutex<String>>,
    lines: mpsc::Receiver<String>,
}

fn spawn(mut cmd: Command) -> std::io::Result<Side> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let text = Arc::new(Mutex::new(String::new()));
    let (tx, lines) = mpsc::channel();
    let pipes: Vec<Box<dyn Read + Send>> = vec![
        Box::new(child.stdout.take().expect("piped")),
        Box::new(child.stderr.take().expect("piped")),
    ];
    for pipe in pipes {
        let (text, tx) = (text.clone(), tx.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut t = text.lock().expect("output lock");
                t.push_str(&line);
                t.push('\n');
                let _ = tx.send(line);
            }
        });
    }
    Ok(Side { child, text, lines })
}

impl Side {
    /// Waits for the process to exit; kills it (by its own PID) past `timeout`.
    fn finish(mut self, timeout: Duration) -> (String, Option<String>) {
        let start = Instant::now();
        let mut error = None;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if start.elapsed() > timeout => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    error = Some(format!("no result within {timeout:?}: stopped"));
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        // The reader threads end with the pipes; give them a moment to drain.
        std::thread::sleep(Duration::from_millis(50));
        let text = self.text.lock().expect("output lock").clone();
        (text, error)
    }
}

impl Perftest {
    fn command(
        &self,
        t: &Target,
        memlock: Limit,
        size: u64,
        tcp_port: u16,
        server: bool,
    ) -> Command {
        let mut cmd = Command::new(&self.prlimit);
        cmd.arg(format!("--memlock={v}:{v}", v = value(memlock)));
        for (name, l) in &self.rlimits {
            cmd.arg(format!("--{name}={v}:{v}", v = value(*l)));
        }
        if let Some(setpriv) = &self.setpriv {
            cmd.arg(setpriv)
                .args(["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]);
        }
        cmd.arg(&self.binary)
            .args(["-d", &t.device, "-i", &t.port.to_string()])
            .args(["-s", &size.to_string(), "-p", &tcp_port.to_string()]);
        if t.software {
            // Soft-RoCE moves what its CPU does (0.31 Gb/s under an emulated
            // one): 5000 MiB-sized writes would outlast the timeout, and the
            // rate is not compared; a hundred prove the transfer.
            cmd.args(["-n", SOFTWARE_ITERS]);
        }
        cmd
            // -F: a CPU frequency warning must not fail the run; Gb/s to compare with the rate.
            .args(["-F", "--report_gbits"]);
        if !server {
            cmd.arg("127.0.0.1");
        }
        cmd
    }
}

impl Runner for Perftest {
    fn run(&self, t: &Target, memlock: Limit, size: u64, tcp_port: u16) -> RunOutput {
        let server = match spawn(self.command(t, memlock, size, tcp_port, true)) {
            Ok(s) => s,
            Err(e) => {
                return RunOutput {
                    error: Some(format!("cannot start {}: {e}", self.prlimit.display())),
                    ..RunOutput::default()
                };
            }
        };
        // The client must not connect before the server listens. Its
        // "Waiting for client" line may sit in its stdout buffer (a pipe is
        // not a terminal: perftest 4.5 does not flush it), so its listening
        // socket says it too.
        let start = Instant::now();
        let mut ready = false;
        while start.elapsed() < self.timeout {
            match server.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains("Waiting for client") => {
                    ready = true;
                    break;
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) if listens(server.child.id(), tcp_port) => {
                    ready = true;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        if !ready {
            let (text, error) = server.finish(Duration::from_secs(1));
            return RunOutput {
                client: String::new(),
                server: text,
                error: Some(error.unwrap_or_else(|| {
                    "the ib_write_bw server did not start listening".to_owned()
                })),
            };
        }
        let (client, client_error) = match spawn(self.command(t, memlock, size, tcp_port, false)) {
            Ok(c) => c.finish(self.timeout),
            Err(e) => (String::new(), Some(format!("cannot start the client: {e}"))),
        };
        let (server, server_error) = server.finish(Duration::from_secs(10));
        RunOutput {
            client,
            server,
            error: client_error.or(server_error),
        }
    }
}

/// Whether the server (`pid`: prlimit and setpriv exec it in place) holds a
/// socket listening on TCP `port`: another program's listener on that port
/// (a selftest run by hand beside the daemon's) is not this server's. The
/// test runs here, whatever `--root` says.
pub fn listens(pid: u32, port: u16) -> bool {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| listening_in(&t, port))
        .collect();
    if inodes.is_empty() {
        return false;
    }
    // This machine's /proc, whatever `--root` says: the host layer's walk
    // of a descriptor directory, rooted at /.
    let Ok(links) = crate::host::Host::new("/").link_targets(Path::new(&format!("/proc/{pid}/fd")))
    else {
        return false;
    };
    links
        .iter()
        .any(|l| inodes.iter().any(|i| *l == format!("socket:[{i}]")))
}

/// The inodes of the sockets `/proc/net/tcp{,6}` shows in state LISTEN (0A)
/// on local `port`.
pub fn listening_in(table: &str, port: u16) -> Vec<u64> {
    let want = format!("{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let listening = f.get(3) == Some(&"0A")
                && f.get(1).and_then(|a| a.rsplit(':').next()) == Some(want.as_str());
            listening.then(|| f.get(9)?.parse().ok()).flatten()
        })
        .collect()
}

/// A program on this machine's PATH (the test runs here even under `--root`).
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
