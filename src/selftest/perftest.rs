//! perftest's `ib_write_bw` output, as admins see it: a parameter table, then
//! a result table whose header names the unit (`BW average[Gb/sec]` with
//! `--report_gbits`, `[MB/sec]` otherwise), or one of its error messages.
//! perftest's MB is 2^20 bytes and its Gb 10^9 bits (`format_factor` in
//! perftest_resources.c: 0x100000 or 125000000 bytes).

use serde::Serialize;

/// One result line: `#bytes #iterations BW peak BW average MsgRate[Mpps]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bandwidth {
    pub bytes: u64,
    pub iterations: u64,
    pub peak_gbps: f64,
    pub average_gbps: f64,
    pub msg_rate_mpps: f64,
}

/// Why a run gave no result, from perftest's own messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum Failure {
    /// "Couldn't allocate MR": memory registration refused (RLIMIT_MEMLOCK).
    AllocateMr,
    /// "Port number 1 state is Down".
    PortDown(String),
    /// The device name is not one perftest knows.
    DeviceNotFound(String),
    /// The two sides could not exchange their addresses.
    Connection(String),
    /// The test could not be given the limit under test (prlimit's message).
    Limit(String),
    /// Any other error line perftest printed (or none).
    Other(String),
}

impl Failure {
    pub fn describe(&self) -> String {
        match self {
            Failure::AllocateMr => "Couldn't allocate MR: memory registration was refused \
                                    (RLIMIT_MEMLOCK too low without CAP_IPC_LOCK)"
                .to_owned(),
            Failure::PortDown(l) | Failure::DeviceNotFound(l) | Failure::Connection(l) => l.clone(),
            Failure::Limit(l) => {
                format!("{l} (raising a hard limit needs root with CAP_SYS_RESOURCE)")
            }
            Failure::Other(l) if l.is_empty() => "no result line in perftest's output".to_owned(),
            Failure::Other(l) => l.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    GbitPerSec,
    MibPerSec,
}

impl Unit {
    fn to_gbps(self, v: f64) -> f64 {
        match self {
            Unit::GbitPerSec => v,
            Unit::MibPerSec => v * 1_048_576.0 * 8.0 / 1e9,
        }
    }
}

fn header_unit(line: &str) -> Option<Unit> {
    if !line.contains("#bytes") {
        return None;
    }
    if line.contains("[Gb/sec]") {
        Some(Unit::GbitPerSec)
    } else if line.contains("[MB/sec]") {
        Some(Unit::MibPerSec)
    } else {
        None
    }
}

fn result_line(line: &str, unit: Unit) -> Option<Bandwidth> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 5 {
        return None;
    }
    Some(Bandwidth {
        bytes: f[0].parse().ok()?,
        iterations: f[1].parse().ok()?,
        peak_gbps: unit.to_gbps(f[2].parse().ok()?),
        average_gbps: unit.to_gbps(f[3].parse().ok()?),
        msg_rate_mpps: f[4].parse().ok()?,
    })
}

/// The first result line of one side's output, in the unit of the result
/// header above it. In a shell where server and client share the terminal the
/// lines interleave and both headers precede the figures; the latest header is
/// the client's, whose figures the server repeats.
pub fn parse(output: &str) -> Result<Bandwidth, Failure> {
    let mut unit = None;
    for line in output.lines() {
        if let Some(u) = header_unit(line) {
            unit = Some(u);
            continue;
        }
        if let Some(b) = unit.and_then(|u| result_line(line, u)) {
            return Ok(b);
        }
    }
    Err(failure(output))
}

/// The most telling error perftest printed.
pub fn failure(output: &str) -> Failure {
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    if let Some(l) = lines
        .iter()
        .find(|l| l.starts_with("prlimit: failed to set"))
    {
        return Failure::Limit((*l).to_owned());
    }
    if lines.iter().any(|l| l.contains("Couldn't allocate MR")) {
        return Failure::AllocateMr;
    }
    if let Some(l) = lines
        .iter()
        .find(|l| l.starts_with("Port number") && l.contains("state is"))
    {
        return Failure::PortDown((*l).to_owned());
    }
    if let Some(l) = lines.iter().find(|l| {
        let lower = l.to_ascii_lowercase();
        (lower.contains("device") && lower.contains("not found"))
            || lower.contains("no ib devices found")
            || lower.contains("did not detect devices")
            || lower.contains("unable to find the infiniband/roce device")
    }) {
        return Failure::DeviceNotFound((*l).to_owned());
    }
    if let Some(l) = lines.iter().find(|l| {
        l.contains("Couldn't connect")
            || l.contains("Unable to read to socket")
            || l.contains("Failed to exchange data")
            || l.contains("Couldn't read remote address")
    }) {
        return Failure::Connection((*l).to_owned());
    }
    let error = lines.iter().find(|l| {
        let lower = l.to_ascii_lowercase();
        lower.contains("couldn't") || lower.contains("failed") || lower.contains("unable")
    });
    Failure::Other(error.map(|l| (*l).to_owned()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/perftest")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn loopback_runs_in_gbits() {
        let b = parse(&recorded("edr-100g-loopback-interleaved.txt")).unwrap();
        assert_eq!(
            b,
            Bandwidth {
                bytes: 65536,
                iterations: 5000,
                peak_gbps: 94.72,
                average_gbps: 94.71,
                msg_rate_mpps: 0.180640
            }
        );
        let b = parse(&recorded("hdr-200g-loopback-gbits.txt")).unwrap();
        assert_eq!(b.average_gbps, 183.61);
        assert_eq!(b.peak_gbps, 183.66);
    }

    #[test]
    fn mb_per_sec_is_mebibytes() {
        let b = parse(&recorded("hdr-1m-mbsec-client.txt")).unwrap();
        assert_eq!(b.bytes, 1_048_576);
        // 11129.09 MiB/s × 2^20 × 8 bits.
        assert!(
            (b.average_gbps - 93.357).abs() < 0.001,
            "{}",
            b.average_gbps
        );
        // The server of that run printed the header and nothing after it.
        assert_eq!(
            parse(&recorded("hdr-1m-mbsec-server.txt")),
            Err(Failure::Other(String::new()))
        );
    }

    #[test]
    fn failures_are_named() {
        assert_eq!(
            parse(&recorded("memlock-64k-read-bw-failure.txt")),
            Err(Failure::AllocateMr)
        );
        // The port-down recording starts with the tail of an earlier run's table.
        let down = recorded("port-down.txt");
        let after = &down[down.find("$ ib_write_bw -d mlx5_0 &").unwrap()..];
        assert_eq!(
            parse(after),
            Err(Failure::PortDown("Port number 1 state is Down".into()))
        );
        assert_eq!(
            failure("Failed to exchange data between server and clients\n"),
            Failure::Connection("Failed to exchange data between server and clients".into())
        );
        assert_eq!(
            failure(
                " IB device mlx5_bond_0 not found\n Unable to find the Infiniband/RoCE device\n"
            ),
            Failure::DeviceNotFound("IB device mlx5_bond_0 not found".into())
        );
        // Debian's perftest 4.5 on a kernel without RDMA.
        assert_eq!(
            parse(&recorded("no-devices-perftest-4.5.txt")),
            Err(Failure::DeviceNotFound("Did not detect devices".into()))
        );
        assert_eq!(
            failure("prlimit: failed to set the MEMLOCK resource limit: Operation not permitted\n"),
            Failure::Limit(
                "prlimit: failed to set the MEMLOCK resource limit: Operation not permitted".into()
            )
        );
    }

    /// Soft-RoCE on Debian's 6.1 kernel, recorded by the VM tier (tests/vm/):
    /// without CAP_IPC_LOCK a 64 KiB memlock refuses an 8 MiB region on both
    /// sides, in a plain process and in a runc container; unlimited passes.
    #[test]
    fn real_kernel_recordings_from_the_vm_tier() {
        for side in ["client", "server"] {
            for run in ["write-bw-8m-memlock-64k", "runc-write-bw-8m-memlock-64k"] {
                assert_eq!(
                    parse(&recorded(&format!("rxe/{run}-{side}.txt"))),
                    Err(Failure::AllocateMr),
                    "{run}-{side}"
                );
            }
        }
        for run in [
            "write-bw-8m-memlock-unlimited",
            "runc-write-bw-8m-agent-spec",
        ] {
            let b = parse(&recorded(&format!("rxe/{run}-client.txt"))).unwrap();
            assert_eq!((b.bytes, b.iterations), (8_388_608, 5), "{run}");
            // Soft-RoCE under TCG: tens of MB/s, read as MiB/s.
            assert!(
                b.average_gbps > 0.0 && b.average_gbps < 10.0,
                "{run}: {b:?}"
            );
        }
    }
}
