use super::*;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

fn as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn listener(path: &Path) -> std::os::unix::net::UnixListener {
    std::os::unix::net::UnixListener::bind(path).unwrap()
}

#[test]
fn a_socket_only_root_could_have_made_is_trusted() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run/nri");
    fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("nri.sock");
    let _l = listener(&sock);
    let mode = |m| fs::set_permissions(&sock, fs::Permissions::from_mode(m)).unwrap();
    mode(0o600);
    socket_file(&sock).unwrap();
    // containerd's own: 0660 root:root.
    mode(0o660);
    socket_file(&sock).unwrap();
    mode(0o666);
    let e = socket_file(&sock).unwrap_err();
    assert!(
        e.contains("nri.sock") && e.contains("writable by others"),
        "{e}"
    );
    mode(0o600);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let e = socket_file(&sock).unwrap_err();
    assert!(
        e.contains("run/nri") && e.contains("writable by others"),
        "{e}"
    );
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.join("plain");
    fs::write(&file, "").unwrap();
    assert!(socket_file(&file).unwrap_err().contains("is not a socket"));
    if as_root() {
        mode(0o660);
        nix::unistd::chown(&sock, None, Some(100.into())).unwrap();
        let e = socket_file(&sock).unwrap_err();
        assert!(e.contains("writable by a group other than root"), "{e}");
        nix::unistd::chown(&sock, Some(65534.into()), Some(0.into())).unwrap();
        let e = socket_file(&sock).unwrap_err();
        assert!(
            e.contains("owned by uid 65534") && e.contains("not owned by root"),
            "{e}"
        );
    }
}

/// A listener of uid 65534 on a socket file root made (bound by root, then
/// listened on by a process that dropped to nobody): refused by its peer
/// credentials, which the kernel records at listen().
#[test]
#[ignore = "needs root (setuid in a forked child)"]
fn a_listener_that_is_not_root_is_refused() {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, bind, socket};
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("nri.sock");
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )
    .unwrap();
    bind(fd.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
    socket_file(&path).unwrap();
    let raw = fd.as_raw_fd();
    // SAFETY: the child only makes async-signal-safe calls, then _exits.
    let child = match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => unsafe {
            if nix::libc::setuid(65534) != 0 || nix::libc::listen(raw, 1) != 0 {
                nix::libc::_exit(1);
            }
            let c = nix::libc::accept(raw, std::ptr::null_mut(), std::ptr::null_mut());
            let mut b = [0u8; 1];
            nix::libc::read(c, b.as_mut_ptr().cast(), 1);
            nix::libc::_exit(0)
        },
        nix::unistd::ForkResult::Parent { child } => child,
    };
    drop(fd);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let start = std::time::Instant::now();
        loop {
            match tokio::net::UnixStream::connect(&path).await {
                Ok(s) => break peer(&s, &path),
                Err(_) if start.elapsed().as_secs() < 5 => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
    });
    let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(child, None);
    let e = got.unwrap_err();
    assert!(
        e.contains("runs as uid 65534, not root") && e.contains("nri.sock"),
        "{e}"
    );
    // And root's own listener is believed.
    let own = t.path().join("own.sock");
    let _l = listener(&own);
    rt.block_on(async {
        let s = tokio::net::UnixStream::connect(&own).await.unwrap();
        peer(&s, &own).unwrap();
    });
}
