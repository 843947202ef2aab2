//! The kernel's uapi as a C compiler reads it: a program against
//! /usr/include prints `NAME value` lines (constants, or message bytes in hex),
//! which the golden tests compare with the agent's. Included by path by
//! tests/netlink_golden.rs and tests/devlink_golden.rs.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// What every program starts with: the common headers, a message buffer,
/// `dump` (print the buffer's first bytes in hex under a name) and `put`
/// (append a netlink attribute to the message in the buffer).
const PRELUDE: &str = r#"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <linux/netlink.h>

static unsigned char buf[1024];

static void dump(const char *name, size_t n) {
    printf("%s ", name);
    for (size_t i = 0; i < n; i++) printf("%02x", buf[i]);
    printf("\n");
}

static struct nlattr *put(struct nlmsghdr *h, int type, const void *v, int len) {
    struct nlattr *a = (struct nlattr *)(buf + NLMSG_ALIGN(h->nlmsg_len));
    a->nla_type = type;
    a->nla_len = NLA_HDRLEN + len;
    memcpy((unsigned char *)a + NLA_HDRLEN, v, len);
    h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + NLA_ALIGN(a->nla_len);
    return a;
}
"#;

/// Compiles and runs `program` (which includes `header`) after the prelude,
/// returning its `NAME value` lines.
pub fn run(header: &str, program: &str) -> HashMap<String, String> {
    assert!(
        Path::new(header).exists(),
        "{header} is missing: install the kernel's uapi headers (Debian: apt-get install linux-libc-dev)"
    );
    let dir = tempfile::tempdir().unwrap();
    let (src, bin) = (dir.path().join("golden.c"), dir.path().join("golden"));
    std::fs::write(&src, format!("{PRELUDE}{program}")).unwrap();
    // cc is present wherever cargo links Rust on Linux.
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc (the C compiler cargo links with)");
    assert!(
        cc.status.success(),
        "compiling the uapi program failed: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&bin).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
