//! Helpers for scripts/bench-vs-node-exporter.sh:
//!
//! - `bench_sysfs tree DIR PFS VFS`: writes a synthetic node of `PFS * (1 + VFS)`
//!   RDMA devices under DIR (the generator the tests and `cargo bench` use).
//! - `bench_sysfs floor LIST`: the floor to compare a check against: open, read
//!   to the end and close each file named in LIST (one path a line), nothing else.
//! - `bench_sysfs floor-walk LIST DIRS LINKS`: the same, then list each
//!   directory of DIRS (open, getdents64 to the end, close) and read each link
//!   of LINKS: a second floor, with the directory listings and link reads a
//!   walk of the class cannot do without (scripts/bench-inventory.sh).

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
        ["floor", list] => match floor(list) {
            Some(files) => {
                println!("{files}");
                ExitCode::SUCCESS
            }
            None => ExitCode::FAILURE,
        },
        ["floor-walk", list, dirs, links] => {
            let (Some(files), Some(dirs), Some(links)) =
                (floor(list), listings(dirs), readlinks(links))
            else {
                return ExitCode::FAILURE;
            };
            println!("{files} {dirs} {links}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "usage: bench_sysfs tree DIR PFS VFS | bench_sysfs floor LIST | bench_sysfs floor-walk LIST DIRS LINKS"
            );
            ExitCode::FAILURE
        }
    }
}

fn lines(list: &str) -> Option<String> {
    std::fs::read_to_string(list)
        .map_err(|e| eprintln!("cannot read {list}: {e}"))
        .ok()
}

/// Open, read to the end and close each file of `list`: how many opened.
fn floor(list: &str) -> Option<usize> {
    let list = lines(list)?;
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
    Some(files)
}

/// Open, list with getdents64 to its end (the call that returns nothing
/// included, as any listing needs) and close each directory of `list`.
fn listings(list: &str) -> Option<usize> {
    use std::mem::MaybeUninit;
    let list = lines(list)?;
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut dirs = 0;
    for path in list.lines().filter(|l| !l.is_empty()) {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let Ok(fd) = open(path, flags, Mode::empty()) else {
            continue;
        };
        let mut entries = rustix::fs::RawDir::new(&fd, &mut buf);
        while let Some(Ok(_)) = entries.next() {}
        let _ = nix::unistd::close(fd);
        dirs += 1;
    }
    Some(dirs)
}

/// Read each link of `list`.
fn readlinks(list: &str) -> Option<usize> {
    let list = lines(list)?;
    let n = list
        .lines()
        .filter(|l| !l.is_empty())
        .filter(|p| nix::fcntl::readlink(*p).is_ok())
        .count();
    Some(n)
}
