//! The abuse client of scripts/bench-memory-abuse.sh (tests/support/abuse.rs):
//! `abuse_http PORT [CONNS]` runs one round against 127.0.0.1:PORT and prints
//! what came back. Only loopback, bounded in connections and time.

#[path = "../tests/support/abuse.rs"]
#[allow(dead_code)] // rss_kib is for the tests
mod abuse;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(Ok(port)) = args.first().map(|p| p.parse::<u16>()) else {
        eprintln!("usage: abuse_http PORT [CONNS]");
        return ExitCode::FAILURE;
    };
    let mut a = abuse::Abuse::default();
    if let Some(n) = args.get(1).and_then(|n| n.parse().ok()) {
        a.conns = n;
    }
    let out = abuse::round(([127, 0, 0, 1], port).into(), a);
    println!("{out}");
    ExitCode::SUCCESS
}
