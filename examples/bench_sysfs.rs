//! Helpers for scripts/bench-vs-node-exporter.sh:
//!
//! - `bench_sysfs tree DIR PFS VFS`: writes a synthetic node of `PFS * (1 + VFS)`
//!   RDMA devices under DIR (the generator the tests and `cargo bench` use).
//! - `bench_sysfs floor LIST`: the floor to compare a check against: open, read
//!   to the end and close each file named in LIST (one path a line), nothing else.

#[path = "../tests/support/sysfs.rs"]
mod sysfs;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["tree", dir, pfs, vfs] => {
            let (Ok(pfs), Ok(vfs)) = (pfs.parse(), vfs.parse()) else {
                eprintln!("PFS and VFS are counts, got {pfs:?} and {vfs:?}");
                return ExitCode::FAILURE;
            };
            sysfs::sriov_tree(Path::new(dir), pfs, vfs);
            ExitCode::SUCCESS
        }
        ["floor", list] => {
            let list = match std::fs::read_to_string(list) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("cannot read {list}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let mut buf = [0u8; 4096];
            let mut files = 0;
            for path in list.lines().filter(|l| !l.is_empty()) {
                // Plain system calls (a debug build's File would add an fcntl check
                // at each close), a stack buffer, no stat, and a short read is the
                // end, as for a sysfs attribute: what the agent's reads do at best.
                let Ok(fd) = open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()) else {
                    continue;
                };
                while matches!(nix::unistd::read(&fd, &mut buf), Ok(n) if n == buf.len()) {}
                let _ = nix::unistd::close(fd);
                files += 1;
            }
            println!("{files}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: bench_sysfs tree DIR PFS VFS | bench_sysfs floor LIST");
            ExitCode::FAILURE
        }
    }
}
