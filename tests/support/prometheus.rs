//! A real Prometheus (Debian's `prometheus` package) for the fleet test: its
//! own config, rules and TSDB in a temp dir, its API behind TLS and basic
//! auth (its `--web.config.file`), so `fleet`'s credentials and CA options
//! meet a real server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A CA, a server certificate for 127.0.0.1 signed by it, and a basic auth
/// user whose bcrypt hash Prometheus checks.
pub struct Credentials {
    pub ca: PathBuf,
    pub user: String,
    pub password: String,
    pub password_file: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    hash: String,
}

/// `promtool test rules` of `tests` (promtool's test-file `tests` list, as
/// JSON, which is YAML) against the rules file; fails with promtool's output.
pub fn promtool_test(rules: &Path, tests: Value) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(rules, dir.path().join("rules.yml")).unwrap();
    let test = serde_json::json!({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests});
    std::fs::write(dir.path().join("test.yml"), test.to_string()).unwrap();
    let o = Command::new("promtool")
        .current_dir(dir.path())
        .args(["test", "rules", "test.yml"])
        .output()
        .expect("promtool (Debian's prometheus package): run scripts/test.sh");
    assert!(
        o.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (openssl, python3: scripts/test.sh installs them)")
    });
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

impl Credentials {
    pub fn new(dir: &Path) -> Credentials {
        let p = |n: &str| dir.join(n);
        let openssl = |args: &[&str]| run(Command::new("openssl").current_dir(dir).args(args));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=fleet test CA",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(
            p("ext.cnf"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ]);
        let password = "fleet-pw-5e0c1d-never-printed".to_owned();
        // bcrypt, as Prometheus' web config asks; cost 4 keeps each check cheap.
        let hash = run(Command::new("/usr/bin/python3").args([
            "-c",
            "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))",
            &password,
        ]))
        .trim()
        .to_owned();
        assert!(hash.starts_with("$2b$04$"), "bcrypt hash: {hash}");
        std::fs::write(p("password"), format!("{password}\n")).unwrap();
        Credentials {
            ca: p("ca.crt"),
            user: "fleet".into(),
            password,
            password_file: p("password"),
            cert: p("server.crt"),
            key: p("server.key"),
            hash,
        }
    }
}

pub struct Prometheus {
    child: Child,
    pub url: String,
    client: reqwest::blocking::Client,
    creds: (String, String),
    pub dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus on `config` (YAML; rule files named in it are read
    /// from `dir`), its TSDB and log under `dir`; waits until it answers.
    pub fn start(dir: &Path, config: &str, creds: &Credentials) -> Prometheus {
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        std::fs::write(
            dir.join("web.yml"),
            format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {}: '{}'\n",
                creds.cert.display(),
                creds.key.display(),
                creds.user,
                creds.hash
            ),
        )
        .unwrap();
        let addr = super::free_addr();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .current_dir(dir)
            .arg("--config.file=prometheus.yml")
            .arg("--web.config.file=web.yml")
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian's prometheus package): run scripts/test.sh");
        let pem = std::fs::read(&creds.ca).unwrap();
        let client = rdma_node_agent::host::http_client::blocking_builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let p = Prometheus {
            child,
            url: format!("https://{addr}"),
            client,
            creds: (creds.user.clone(), creds.password.clone()),
            dir: dir.to_owned(),
        };
        let start = Instant::now();
        while p.try_get("/-/ready").is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "Prometheus did not get ready: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn try_get(&self, path: &str) -> Option<String> {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .basic_auth(&self.creds.0, Some(&self.creds.1))
            .send()
            .ok()?;
        r.status().is_success().then(|| r.text().ok()).flatten()
    }

    /// An API answer's `data`.
    pub fn api(&self, path: &str) -> Value {
        let text = self
            .try_get(path)
            .unwrap_or_else(|| panic!("Prometheus did not answer {path}"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "success", "{path}: {v}");
        v["data"].clone()
    }

    /// An instant query's result, or Prometheus' error for it.
    pub fn query(&self, q: &str) -> Result<Vec<Value>, String> {
        let r = self
            .client
            .get(
                reqwest::Url::parse_with_params(
                    &format!("{}/api/v1/query", self.url),
                    [("query", q)],
                )
                .unwrap(),
            )
            .basic_auth(&self.creds.0, Some(&self.creds.1))
            .send()
            .map_err(|e| e.to_string())?;
        let v: Value = r.json().map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{q}: {v}"));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// One number from a query that gives one sample (0 for none).
    pub fn scalar(&self, q: &str) -> f64 {
        let r = self.query(q).unwrap();
        r.first()
            .and_then(|s| s["value"][1].as_str()?.parse().ok())
            .unwrap_or(0.0)
    }

    /// A sample of Prometheus' own /metrics (it does not scrape itself here).
    pub fn own_metric(&self, name: &str) -> f64 {
        let text = self.try_get("/metrics").expect("Prometheus' /metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in Prometheus' /metrics"))
    }

    /// The server's resident memory, from /proc.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib * 1024
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
