//! Plain HTTP/1.1 GETs on a loopback address, for the tests that talk to the
//! agent's endpoint (here and in the VM guest, which includes this file alone).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One GET; its status code, and its body when the answer was read whole;
/// `None` while nothing answers.
fn exchange(addr: &str, path: &str) -> Option<(u16, Option<String>)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    let whole = s.read_to_string(&mut out).is_ok();
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
    Some((code, body.filter(|_| whole)))
}

/// The body of a 200 (`None` for anything else, or while nothing answers).
pub fn get(addr: &str, path: &str) -> Option<String> {
    exchange(addr, path).and_then(|(code, body)| body.filter(|_| code == 200))
}

/// The status code of a GET, `None` while nothing answers.
pub fn status_code(addr: &str, path: &str) -> Option<u16> {
    exchange(addr, path).map(|(code, _)| code)
}

/// The body of any answer (a 503's too), `None` while nothing answers.
pub fn get_any(addr: &str, path: &str) -> Option<String> {
    exchange(addr, path).and_then(|(_, body)| body)
}
