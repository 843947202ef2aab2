//! `fleet` and the network between it and Prometheus: credentials never go
//! over plain http:// unless asked for, no `*_PROXY` variable diverts a query
//! (the URL given is the server asked), and an answer past the bound is an
//! error, not a memory spike.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::code;

const TOKEN: &str = "tok-plain-http-never-sent";

/// A loopback server answering every request with `body`; counts the requests.
fn server(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            counted.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            std::thread::spawn(move || {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                );
                let _ = s.write_all(&body);
            });
        }
    });
    (url, seen)
}

const EMPTY: &str = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;

fn fleet(url: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"));
    c.args(["fleet", "--prometheus", url, "--timeout", "5s"])
        .args(extra);
    c
}

#[test]
fn a_token_is_not_sent_over_plain_http_without_the_flag() {
    let (url, seen) = server(EMPTY.as_bytes().to_vec());
    let t = tempfile::tempdir().unwrap();
    let token = t.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let o = fleet(&url, &["--bearer-token-file", token.to_str().unwrap()])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(code(&o), 2, "{all}");
    assert!(
        all.contains("refusing to send credentials") && all.contains("--allow-http-credentials"),
        "{all}"
    );
    assert!(!all.contains(TOKEN));
    assert_eq!(seen.load(Ordering::SeqCst), 0, "a request went out");
    // Asked for explicitly: sent.
    let o = fleet(
        &url,
        &[
            "--bearer-token-file",
            token.to_str().unwrap(),
            "--allow-http-credentials",
        ],
    )
    .output()
    .unwrap();
    assert!(seen.load(Ordering::SeqCst) > 0, "{o:?}");
}

/// HTTP_PROXY and friends pointing elsewhere: the proxy gets nothing, the
/// server given gets the queries.
#[test]
fn proxy_variables_are_ignored() {
    let (url, seen) = server(EMPTY.as_bytes().to_vec());
    let (proxy, proxied) = server(Vec::new());
    let o = fleet(&url, &[])
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("HTTPS_PROXY", &proxy)
        .env("ALL_PROXY", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .unwrap();
    // No agent series: "scrapes no rdma-node-agent", exit 2, but asked.
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("no rdma_node_agent_ready series"), "{e}");
    assert_eq!(proxied.load(Ordering::SeqCst), 0, "the proxy was used");
    assert!(seen.load(Ordering::SeqCst) > 0);
}

/// An answer of 40 MB without a length: stopped at the bound, with a clear
/// error (and the process never held the whole answer).
#[test]
fn an_oversized_answer_is_an_error() {
    let mut body = EMPTY.as_bytes().to_vec();
    body.resize(40 << 20, b' ');
    let (url, _) = server(body);
    let o = fleet(&url, &["--max-answer-bytes", "1000000"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{e}");
    assert!(
        e.contains("answered more than 1000000 bytes") && e.contains("--max-answer-bytes"),
        "{e}"
    );
}
