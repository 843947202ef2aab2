use std::io::{Read, Write};
use std::net::TcpListener;

use super::*;

const TOKEN: &str = "tok-3c9f1e-never-shown";
const PASSWORD: &str = "pw-77a1-never-shown";

/// One HTTP exchange on loopback: answers `status` and `body`, hands back the request.
fn serve_once(status: u16, body: &'static str) -> (String, std::thread::JoinHandle<String>) {
    serve_raw(status, body.as_bytes().to_vec(), true)
}

/// `serve_once` with any body, with or without a Content-Length (without, the
/// answer ends when the connection closes).
fn serve_raw(
    status: u16,
    body: Vec<u8>,
    content_length: bool,
) -> (String, std::thread::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/prefix/", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            req.extend_from_slice(&buf[..n]);
        }
        let length = if content_length {
            format!("Content-Length: {}\r\n", body.len())
        } else {
            String::new()
        };
        write!(
            s,
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{length}Connection: close\r\n\r\n"
        )
        .unwrap();
        // The client may stop reading (and close) once past its bound.
        let _ = s.write_all(&body);
        String::from_utf8(req).unwrap()
    });
    (url, h)
}

fn options(url: &str, auth: Auth) -> Options {
    Options {
        url: url.into(),
        auth,
        ca_file: None,
        insecure_skip_verify: false,
        timeout: Duration::from_secs(5),
        // The loopback test server speaks plain http.
        allow_http_credentials: true,
        max_answer_bytes: MAX_ANSWER_BYTES,
    }
}

fn secret(dir: &Path, name: &str, text: &str) -> Secret {
    let p = dir.join(name);
    std::fs::write(&p, format!("{text}\n")).unwrap();
    Secret::from_file("test secret", &p).unwrap()
}

const VECTOR: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
 {"metric":{"__name__":"rdma_node_agent_ready","instance":"10.0.0.1:9470","node":"gpu-1"},"value":[1700000000.1,"0"]},
 {"metric":{"instance":"10.0.0.2:9470"},"value":[1700000000.1,"NaN"]}]}}"#;

#[test]
fn a_query_sends_the_bearer_token_to_the_prefixed_api_and_reads_the_vector() {
    let t = tempfile::tempdir().unwrap();
    let (url, h) = serve_once(200, VECTOR);
    let p = Prometheus::new(&options(&url, Auth::Bearer(secret(t.path(), "t", TOKEN)))).unwrap();
    let got = p.query("rdma_node_agent_ready == 0").unwrap();
    let req = h.join().unwrap();
    assert!(
        req.starts_with("GET /prefix/api/v1/query?query=rdma_node_agent_ready+%3D%3D+0 HTTP/1.1"),
        "{req}"
    );
    assert!(
        req.contains(&format!("authorization: Bearer {TOKEN}\r\n")),
        "{req}"
    );
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].labels["node"], "gpu-1");
    assert_eq!(got[0].value, 0.0);
    assert!(got[1].value.is_nan());
}

#[test]
fn basic_auth_is_sent_and_a_refusal_names_the_status_and_what_to_check_but_no_secret() {
    let t = tempfile::tempdir().unwrap();
    let (url, h) = serve_once(401, "Unauthorized\n");
    let auth = Auth::Basic {
        user: "admin".into(),
        password: secret(t.path(), "p", PASSWORD),
    };
    let o = options(&url, auth);
    let e = Prometheus::new(&o).unwrap().query("up").unwrap_err();
    let req = h.join().unwrap();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("admin:{PASSWORD}"));
    assert!(
        req.contains(&format!("authorization: Basic {b64}\r\n")),
        "{req}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&url) && msg.contains("HTTP 401 (Unauthorized)"),
        "{msg}"
    );
    assert!(msg.contains("--basic-auth-password-file"), "{msg}");
    for shown in [msg, format!("{e:?}"), format!("{o:?}")] {
        assert!(
            !shown.contains(PASSWORD) && !shown.contains(&b64),
            "{shown}"
        );
    }
}

#[test]
fn a_bad_query_gives_prometheus_own_error() {
    let (url, h) = serve_once(
        400,
        r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected \"=\""}"#,
    );
    let e = Prometheus::new(&options(&url, Auth::None))
        .unwrap()
        .query("up ==")
        .unwrap_err();
    h.join().unwrap();
    assert_eq!(
        e.to_string(),
        format!(
            "Prometheus at {url} could not run the query `up ==`: bad_data: 1:5: parse error: unexpected \"=\""
        )
    );
}

#[test]
fn a_wrong_path_says_where_the_api_must_answer() {
    let (url, h) = serve_once(404, "404 page not found\n");
    let e = Prometheus::new(&options(&url, Auth::None))
        .unwrap()
        .query("up")
        .unwrap_err();
    h.join().unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("HTTP 404") && msg.contains("/api/v1/query"),
        "{msg}"
    );
}

#[test]
fn nothing_listening_names_the_url() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}");
    let e = Prometheus::new(&options(&url, Auth::None))
        .unwrap()
        .query("up")
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, PromError::Unreachable { .. }), "{msg}");
    assert!(
        msg.starts_with(&format!("cannot reach Prometheus at {url}/: ")),
        "{msg}"
    );
}

#[test]
fn credentials_in_the_url_are_refused_without_being_repeated() {
    let e = Prometheus::new(&options(
        &format!("https://admin:{PASSWORD}@prom.example:9090/"),
        Auth::None,
    ))
    .err()
    .unwrap();
    let msg = e.to_string();
    assert!(msg.contains("--basic-auth-password-file"), "{msg}");
    assert!(!msg.contains(PASSWORD) && !msg.contains("admin"), "{msg}");
    for bad in ["prom:9090", "ftp://prom/", "http://prom/?x=1"] {
        assert!(
            matches!(
                Prometheus::new(&options(bad, Auth::None)),
                Err(PromError::BadUrl { .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn answers_that_are_not_a_vector_are_malformed() {
    for (body, want) in [
        ("<html>", "not JSON"),
        (r#"{"x":1}"#, "no \"status\""),
        (
            r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            "gave a matrix",
        ),
        (
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}"#,
            "\"x\" is not a number",
        ),
    ] {
        let e = decode("http://p/", "q", 200, body.as_bytes()).unwrap_err();
        assert!(e.to_string().contains(want), "{body}: {e}");
    }
}

#[test]
fn secret_files_lose_their_newline_and_may_not_be_empty() {
    let t = tempfile::tempdir().unwrap();
    assert_eq!(secret(t.path(), "a", "x y").0, "x y");
    std::fs::write(t.path().join("e"), "\n").unwrap();
    let e = Secret::from_file("--bearer-token-file", &t.path().join("e")).unwrap_err();
    assert!(e.to_string().contains("is empty"), "{e}");
    let e = Secret::from_file("--bearer-token-file", &t.path().join("absent")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot read the --bearer-token-file "),
        "{e}"
    );
}

#[test]
fn a_ca_file_without_certificates_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("ca.pem");
    std::fs::write(&p, "not a certificate\n").unwrap();
    let mut o = options("https://prom.example/", Auth::None);
    o.ca_file = Some(p);
    let e = Prometheus::new(&o).err().unwrap();
    assert!(matches!(e, PromError::BadCa { .. }), "{e}");
}

/// Credentials over plain http:// are refused before anything is sent, unless
/// asked for; the message names neither secret.
#[test]
fn credentials_over_plain_http_need_the_explicit_flag() {
    let t = tempfile::tempdir().unwrap();
    for auth in [
        Auth::Bearer(secret(t.path(), "t", TOKEN)),
        Auth::Basic {
            user: "fleet".into(),
            password: secret(t.path(), "p", PASSWORD),
        },
    ] {
        let o = Options {
            allow_http_credentials: false,
            ..options("http://127.0.0.1:9/", auth.clone())
        };
        let e = Prometheus::new(&o).err().unwrap().to_string();
        assert!(
            e.contains("refusing to send credentials to http://127.0.0.1:9/ over plain http://")
                && e.contains("--allow-http-credentials")
                && !e.contains(TOKEN)
                && !e.contains(PASSWORD),
            "{e}"
        );
        let https = Options {
            allow_http_credentials: false,
            ..options("https://127.0.0.1:9/", auth)
        };
        assert!(Prometheus::new(&https).is_ok());
    }
    let none = Options {
        allow_http_credentials: false,
        ..options("http://127.0.0.1:9/", Auth::None)
    };
    assert!(Prometheus::new(&none).is_ok());
}

/// An answer past the bound is an error naming it, whether the server says
/// its length first or streams it until it closes.
#[test]
fn an_answer_past_the_bound_is_refused() {
    for content_length in [true, false] {
        let mut body = VECTOR.as_bytes().to_vec();
        body.resize(4 << 20, b' ');
        let (url, h) = serve_raw(200, body, content_length);
        let o = Options {
            max_answer_bytes: 1 << 20,
            ..options(&url, Auth::None)
        };
        let e = Prometheus::new(&o)
            .unwrap()
            .query("rdma_node_agent_ready")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("answered more than 1048576 bytes to the query `rdma_node_agent_ready`")
                && e.contains("--max-answer-bytes"),
            "{content_length}: {e}"
        );
        h.join().unwrap();
    }
    // Within the bound: read as ever.
    let (url, h) = serve_raw(200, VECTOR.as_bytes().to_vec(), false);
    let o = Options {
        max_answer_bytes: VECTOR.len() as u64,
        ..options(&url, Auth::None)
    };
    assert_eq!(Prometheus::new(&o).unwrap().query("x").unwrap().len(), 2);
    h.join().unwrap();
}
