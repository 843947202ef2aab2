//! The RDMA netlink messages, byte-exact against messages that C builds from the
//! kernel's uapi headers (/usr/include/rdma/rdma_netlink.h, linux/netlink.h) at
//! test time: the constants are the header's, not copied from memory.

use std::path::Path;

use rdma_node_agent::host::netlink::restrack::{self, Step};
use rdma_node_agent::host::netlink::{self, NetnsMode, Reply};

const HEADER: &str = "/usr/include/rdma/rdma_netlink.h";

const PROGRAM: &str = r#"
#include <rdma/rdma_netlink.h>

static void put_u32(struct nlmsghdr *h, int type, __u32 v) { put(h, type, &v, sizeof v); }

/* nla_nest_start_noflag / nla_nest_end, as nldev.c nests its tables. */
static struct nlattr *nest(struct nlmsghdr *h, int type) { return put(h, type, "", 0); }
static void nest_end(struct nlmsghdr *h, struct nlattr *a) {
    a->nla_len = (unsigned char *)buf + h->nlmsg_len - (unsigned char *)a;
}

static struct nlmsghdr *start(int op, int flags, unsigned seq) {
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    memset(buf, 0, sizeof buf);
    h->nlmsg_len = NLMSG_LENGTH(0);
    h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op);
    h->nlmsg_flags = flags;
    h->nlmsg_seq = seq;
    return h;
}

static void put_u8(struct nlmsghdr *h, int type, unsigned char v) {
    struct nlattr *a = (struct nlattr *)(buf + NLMSG_ALIGN(h->nlmsg_len));
    a->nla_type = type;
    a->nla_len = NLA_HDRLEN + sizeof(__u8);
    *((unsigned char *)a + NLA_HDRLEN) = v;
    h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

int main(void) {
    printf("NETLINK_RDMA %d\n", NETLINK_RDMA);
    printf("RDMA_NL_NLDEV %d\n", RDMA_NL_NLDEV);
    printf("SYS_GET %d\n", RDMA_NLDEV_CMD_SYS_GET);
    printf("SYS_SET %d\n", RDMA_NLDEV_CMD_SYS_SET);
    printf("NETNS_MODE %d\n", RDMA_NLDEV_SYS_ATTR_NETNS_MODE);
    printf("COPY_ON_FORK %d\n", RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK);

    start(RDMA_NLDEV_CMD_SYS_GET, NLM_F_REQUEST | NLM_F_ACK, 0x01020304);
    dump("GET", NLMSG_LENGTH(0));

    struct nlmsghdr *h = start(RDMA_NLDEV_CMD_SYS_SET, NLM_F_REQUEST | NLM_F_ACK, 42);
    put_u8(h, RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 0);
    dump("SET_EXCLUSIVE", h->nlmsg_len);
    h = start(RDMA_NLDEV_CMD_SYS_SET, NLM_F_REQUEST | NLM_F_ACK, 43);
    put_u8(h, RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 1);
    dump("SET_SHARED", h->nlmsg_len);

    /* What a kernel answers to SYS_GET: both system attributes. */
    h = start(RDMA_NLDEV_CMD_SYS_GET, 0, 9);
    put_u8(h, RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 1);
    put_u8(h, RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, 1);
    dump("ANSWER_SHARED", h->nlmsg_len);

    /* A capped error answer to a SET: -EBUSY and the request's header. */
    memset(buf, 0, sizeof buf);
    h = (struct nlmsghdr *)buf;
    h->nlmsg_type = NLMSG_ERROR;
    h->nlmsg_flags = NLM_F_CAPPED;
    h->nlmsg_seq = 42;
    struct nlmsgerr *e = NLMSG_DATA(h);
    e->error = -EBUSY;
    e->msg.nlmsg_len = NLMSG_LENGTH(NLA_ALIGN(NLA_HDRLEN + 1));
    e->msg.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_SET);
    e->msg.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    e->msg.nlmsg_seq = 42;
    h->nlmsg_len = NLMSG_LENGTH(sizeof(struct nlmsgerr));
    dump("EBUSY", h->nlmsg_len);
    printf("EBUSY_ERRNO %d\n", EBUSY);

    /* The ACK of a request. */
    e->error = 0;
    h->nlmsg_flags = NLM_F_CAPPED;
    dump("ACK", h->nlmsg_len);

    /* Resource tracking: the commands and attributes, a PD dump request on
     * device 3 as iproute2's rdma/res-pd.c sends it, and an answer shaped as
     * res_get_common_dumpit fills it: the device handle, then the PD table, one
     * entry owned by pid 4301 and one by the kernel (its name, no PID). */
    printf("CMD_GET %d\n", RDMA_NLDEV_CMD_GET);
    printf("RES_QP_GET %d\n", RDMA_NLDEV_CMD_RES_QP_GET);
    printf("RES_CM_ID_GET %d\n", RDMA_NLDEV_CMD_RES_CM_ID_GET);
    printf("RES_MR_GET %d\n", RDMA_NLDEV_CMD_RES_MR_GET);
    printf("RES_PD_GET %d\n", RDMA_NLDEV_CMD_RES_PD_GET);
    printf("RES_CTX_GET %d\n", RDMA_NLDEV_CMD_RES_CTX_GET);
    printf("DEV_INDEX %d\n", RDMA_NLDEV_ATTR_DEV_INDEX);
    printf("DEV_NAME %d\n", RDMA_NLDEV_ATTR_DEV_NAME);
    printf("RES_PID %d\n", RDMA_NLDEV_ATTR_RES_PID);
    printf("RES_KERN_NAME %d\n", RDMA_NLDEV_ATTR_RES_KERN_NAME);
    printf("TABLES %d,%d %d,%d %d,%d %d,%d %d,%d\n",
           RDMA_NLDEV_ATTR_RES_CTX, RDMA_NLDEV_ATTR_RES_CTX_ENTRY,
           RDMA_NLDEV_ATTR_RES_PD, RDMA_NLDEV_ATTR_RES_PD_ENTRY,
           RDMA_NLDEV_ATTR_RES_CM_ID, RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY,
           RDMA_NLDEV_ATTR_RES_QP, RDMA_NLDEV_ATTR_RES_QP_ENTRY,
           RDMA_NLDEV_ATTR_RES_MR, RDMA_NLDEV_ATTR_RES_MR_ENTRY);
    printf("NLM_F_DUMP %d\n", NLM_F_DUMP);
    h = start(RDMA_NLDEV_CMD_RES_PD_GET, NLM_F_REQUEST | NLM_F_DUMP, 77);
    put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 3);
    dump("PD_DUMP", h->nlmsg_len);
    h = start(RDMA_NLDEV_CMD_RES_PD_GET, NLM_F_MULTI, 77);
    put_u32(h, RDMA_NLDEV_ATTR_DEV_INDEX, 3);
    put(h, RDMA_NLDEV_ATTR_DEV_NAME, "rxe0", 5);
    struct nlattr *table = nest(h, RDMA_NLDEV_ATTR_RES_PD);
    struct nlattr *entry = nest(h, RDMA_NLDEV_ATTR_RES_PD_ENTRY);
    put_u32(h, RDMA_NLDEV_ATTR_RES_PDN, 1);
    put_u32(h, RDMA_NLDEV_ATTR_RES_PID, 4301);
    nest_end(h, entry);
    entry = nest(h, RDMA_NLDEV_ATTR_RES_PD_ENTRY);
    put_u32(h, RDMA_NLDEV_ATTR_RES_PDN, 2);
    put(h, RDMA_NLDEV_ATTR_RES_KERN_NAME, "ib_core", 8);
    nest_end(h, entry);
    nest_end(h, table);
    dump("PD_ANSWER", h->nlmsg_len);
    h = start(0, NLM_F_MULTI, 77);
    h->nlmsg_type = NLMSG_DONE;
    int zero = 0;
    memcpy(NLMSG_DATA(h), &zero, sizeof zero);
    h->nlmsg_len = NLMSG_LENGTH(sizeof zero);
    dump("DONE", h->nlmsg_len);
    return 0;
}
"#;

fn uapi() -> std::collections::HashMap<String, String> {
    uapi::run(HEADER, PROGRAM)
}

#[path = "support/uapi.rs"]
mod uapi;
use uapi::{hex, unhex};

#[test]
fn constants_are_the_kernel_headers() {
    let u = uapi();
    assert_eq!(u["NETLINK_RDMA"], netlink::NETLINK_RDMA.to_string());
    assert_eq!(u["RDMA_NL_NLDEV"], netlink::RDMA_NL_NLDEV.to_string());
    assert_eq!(u["SYS_GET"], netlink::RDMA_NLDEV_CMD_SYS_GET.to_string());
    assert_eq!(u["SYS_SET"], netlink::RDMA_NLDEV_CMD_SYS_SET.to_string());
    assert_eq!(
        u["NETNS_MODE"],
        netlink::RDMA_NLDEV_SYS_ATTR_NETNS_MODE.to_string()
    );
}

#[test]
fn requests_are_byte_exact() {
    let u = uapi();
    assert_eq!(hex(&netlink::encode_sys_get(0x01020304)), u["GET"]);
    assert_eq!(
        hex(&netlink::encode_sys_set(42, NetnsMode::Exclusive)),
        u["SET_EXCLUSIVE"]
    );
    assert_eq!(
        hex(&netlink::encode_sys_set(43, NetnsMode::Shared)),
        u["SET_SHARED"]
    );
    // A SET never carries COPY_ON_FORK: its attribute number appears nowhere.
    let set = netlink::encode_sys_set(42, NetnsMode::Exclusive);
    let cof: u16 = u["COPY_ON_FORK"].parse().unwrap();
    assert!(
        !set[16..]
            .chunks(2)
            .any(|c| c == cof.to_ne_bytes().as_slice())
    );
}

#[test]
fn kernel_answers_decode() {
    let u = uapi();
    assert_eq!(
        netlink::decode(&unhex(&u["ANSWER_SHARED"])).unwrap(),
        vec![Reply::System {
            seq: 9,
            netns_mode: Some(1)
        }]
    );
    let ebusy: i32 = u["EBUSY_ERRNO"].parse().unwrap();
    assert_eq!(
        netlink::decode(&unhex(&u["EBUSY"])).unwrap(),
        vec![Reply::Error {
            seq: 42,
            errno: ebusy,
            message: None
        }]
    );
    assert_eq!(
        netlink::decode(&unhex(&u["ACK"])).unwrap(),
        vec![Reply::Ack { seq: 42 }]
    );
}

/// On a kernel without RDMA the real socket cannot open: the error must say so.
/// Skipped where ib_core exists (opening the socket could load it).
#[test]
fn real_socket_without_rdma_says_so() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let modules = Path::new("/lib/modules").join(release.trim());
    let lists =
        |f: &str| std::fs::read_to_string(modules.join(f)).is_ok_and(|t| t.contains("/ib_core.ko"));
    if Path::new("/sys/module/ib_core").exists() || lists("modules.dep") || lists("modules.builtin")
    {
        eprintln!("this kernel has RDMA: not opening a socket that could load ib_core");
        return;
    }
    let e = netlink::Socket::open()
        .err()
        .expect("NETLINK_RDMA without RDMA");
    assert!(matches!(e, netlink::NetlinkError::Unavailable(_)), "{e}");
    assert!(e.to_string().contains("no RDMA core loaded"), "{e}");
}

#[test]
fn restrack_constants_are_the_kernel_headers() {
    let u = uapi();
    assert_eq!(u["CMD_GET"], restrack::RDMA_NLDEV_CMD_GET.to_string());
    assert_eq!(
        u["RES_QP_GET"],
        restrack::RDMA_NLDEV_CMD_RES_QP_GET.to_string()
    );
    assert_eq!(
        u["RES_CM_ID_GET"],
        restrack::RDMA_NLDEV_CMD_RES_CM_ID_GET.to_string()
    );
    assert_eq!(
        u["RES_MR_GET"],
        restrack::RDMA_NLDEV_CMD_RES_MR_GET.to_string()
    );
    assert_eq!(
        u["RES_PD_GET"],
        restrack::RDMA_NLDEV_CMD_RES_PD_GET.to_string()
    );
    assert_eq!(
        u["RES_CTX_GET"],
        restrack::RDMA_NLDEV_CMD_RES_CTX_GET.to_string()
    );
    assert_eq!(
        u["DEV_INDEX"],
        restrack::RDMA_NLDEV_ATTR_DEV_INDEX.to_string()
    );
    assert_eq!(
        u["DEV_NAME"],
        restrack::RDMA_NLDEV_ATTR_DEV_NAME.to_string()
    );
    assert_eq!(u["RES_PID"], restrack::RDMA_NLDEV_ATTR_RES_PID.to_string());
    assert_eq!(
        u["RES_KERN_NAME"],
        restrack::RDMA_NLDEV_ATTR_RES_KERN_NAME.to_string()
    );
    assert_eq!(u["NLM_F_DUMP"], restrack::NLM_F_DUMP.to_string());
    let ours: Vec<String> = [
        restrack::CTX,
        restrack::PD,
        restrack::CM_ID,
        restrack::QP,
        restrack::MR,
    ]
    .iter()
    .map(|k| format!("{},{}", k.table, k.entry))
    .collect();
    assert_eq!(u["TABLES"], ours.join(" "));
    // The commands of the kinds asked.
    assert_eq!(
        restrack::KINDS.map(|k| k.cmd),
        [
            restrack::RDMA_NLDEV_CMD_RES_CTX_GET,
            restrack::RDMA_NLDEV_CMD_RES_PD_GET,
            restrack::RDMA_NLDEV_CMD_RES_CM_ID_GET
        ]
    );
}

#[test]
fn restrack_dump_is_byte_exact_and_its_answer_names_the_owner() {
    let u = uapi();
    assert_eq!(
        hex(&restrack::encode_dump(
            77,
            restrack::RDMA_NLDEV_CMD_RES_PD_GET,
            Some(3)
        )),
        u["PD_DUMP"]
    );
    let mut got = Vec::new();
    let answer = unhex(&u["PD_ANSWER"]);
    assert_eq!(
        restrack::collect(&answer, restrack::PD.cmd, 77, &mut got).unwrap(),
        Step::More
    );
    assert_eq!(
        restrack::collect(&unhex(&u["DONE"]), restrack::PD.cmd, 77, &mut got).unwrap(),
        Step::Done
    );
    assert_eq!(got.len(), 1);
    assert_eq!(
        restrack::parse_device(&got[0]).unwrap(),
        Some((3, "rxe0".to_owned()))
    );
    // The kernel-owned entry has no PID: only 4301.
    assert_eq!(
        restrack::parse_pids(&got[0], restrack::PD).unwrap(),
        vec![4301]
    );
}

#[path = "support/restrack_recording.rs"]
mod recording;

/// Real kernel bytes: Debian bookworm's kernel with Soft-RoCE answering the
/// agent's dumps while two ib_write_bw held resources over rxe0, recorded in
/// the VM tier (tests/fixtures/restrack/PROVENANCE). The agent's decoder names
/// the owners `rdma resource show pd` listed in the same run.
#[test]
fn real_kernel_dumps_name_the_owners_iproute2_listed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/restrack");
    let rec = std::fs::read_to_string(dir.join("rxe0-dumps.txt")).unwrap();
    let listing = std::fs::read_to_string(dir.join("rxe0-rdma-resource-show-pd.txt")).unwrap();
    let devices: Vec<(u32, String)> = recording::payloads(&rec, restrack::RDMA_NLDEV_CMD_GET)
        .iter()
        .filter_map(|p| restrack::parse_device(p).unwrap())
        .collect();
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!(devices[0].1, "rxe0");
    let listed = recording::iproute2_pids(&listing);
    assert_eq!(listed.len(), 2, "{listing}");
    assert_eq!(recording::pids(&rec, restrack::PD), listed);
    assert_eq!(recording::pids(&rec, restrack::CTX), listed);
    assert!(recording::pids(&rec, restrack::CM_ID).is_empty());
    // The kernel's own PD (ib_core's, `comm [ib_core]`) carries no PID.
    assert!(listing.contains("comm [ib_core]"), "{listing}");
}
