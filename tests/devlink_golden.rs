//! The devlink health messages, byte-exact against messages that C builds from
//! the kernel's uapi headers (/usr/include/linux/genetlink.h, linux/devlink.h,
//! linux/netlink.h: Debian's linux-libc-dev) at test time, and a reporter
//! answer laid out as the kernel's devlink_nl_health_reporter_fill() lays it
//! out (bus and device name, then the reporter nest), decoded by the agent.

use rdma_node_agent::host::devlink;

const PROGRAM: &str = r#"
#include <linux/genetlink.h>
#include <linux/devlink.h>

static struct nlmsghdr *start(int type, int flags, unsigned seq, int cmd, int version) {
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    memset(buf, 0, sizeof buf);
    h->nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
    h->nlmsg_type = type;
    h->nlmsg_flags = flags;
    h->nlmsg_seq = seq;
    struct genlmsghdr *g = NLMSG_DATA(h);
    g->cmd = cmd;
    g->version = version;
    return h;
}

int main(void) {
    printf("GENL_ID_CTRL %d\n", GENL_ID_CTRL);
    printf("CTRL_CMD_GETFAMILY %d\n", CTRL_CMD_GETFAMILY);
    printf("CTRL_ATTR_FAMILY_ID %d\n", CTRL_ATTR_FAMILY_ID);
    printf("CTRL_ATTR_FAMILY_NAME %d\n", CTRL_ATTR_FAMILY_NAME);
    printf("DEVLINK_GENL_NAME %s\n", DEVLINK_GENL_NAME);
    printf("DEVLINK_GENL_VERSION %d\n", DEVLINK_GENL_VERSION);
    printf("HEALTH_REPORTER_GET %d\n", DEVLINK_CMD_HEALTH_REPORTER_GET);
    printf("BUS_NAME %d\n", DEVLINK_ATTR_BUS_NAME);
    printf("DEV_NAME %d\n", DEVLINK_ATTR_DEV_NAME);
    printf("PORT_INDEX %d\n", DEVLINK_ATTR_PORT_INDEX);
    printf("REPORTER_NEST %d\n", DEVLINK_ATTR_HEALTH_REPORTER);
    printf("REPORTER_NAME %d\n", DEVLINK_ATTR_HEALTH_REPORTER_NAME);
    printf("REPORTER_STATE %d\n", DEVLINK_ATTR_HEALTH_REPORTER_STATE);
    printf("REPORTER_ERR_COUNT %d\n", DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT);
    printf("REPORTER_RECOVER_COUNT %d\n", DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT);
    printf("REPORTER_DUMP_TS_NS %d\n", DEVLINK_ATTR_HEALTH_REPORTER_DUMP_TS_NS);
    printf("NLM_F_DUMP %d\n", NLM_F_DUMP);

    /* What `devlink` (iproute2) sends to resolve its family. */
    struct nlmsghdr *h = start(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, 7, CTRL_CMD_GETFAMILY, 1);
    put(h, CTRL_ATTR_FAMILY_NAME, DEVLINK_GENL_NAME, strlen(DEVLINK_GENL_NAME) + 1);
    dump("GETFAMILY", h->nlmsg_len);

    /* `devlink health show` with no device: a dump of every reporter. */
    h = start(27, NLM_F_REQUEST | NLM_F_DUMP, 8, DEVLINK_CMD_HEALTH_REPORTER_GET, DEVLINK_GENL_VERSION);
    dump("DUMP", h->nlmsg_len);

    /* The controller's answer: the family id (u16) after the name. */
    h = start(GENL_ID_CTRL, 0, 7, CTRL_CMD_NEWFAMILY, 2);
    put(h, CTRL_ATTR_FAMILY_NAME, DEVLINK_GENL_NAME, strlen(DEVLINK_GENL_NAME) + 1);
    uint16_t id = 27;
    put(h, CTRL_ATTR_FAMILY_ID, &id, sizeof id);
    dump("FAMILY", h->nlmsg_len);

    /* A reporter in error, as devlink_nl_health_reporter_fill() fills it. */
    h = start(27, NLM_F_MULTI, 8, DEVLINK_CMD_HEALTH_REPORTER_GET, DEVLINK_GENL_VERSION);
    put(h, DEVLINK_ATTR_BUS_NAME, "pci", 4);
    put(h, DEVLINK_ATTR_DEV_NAME, "0000:03:00.0", 13);
    struct nlattr *nest = put(h, DEVLINK_ATTR_HEALTH_REPORTER | NLA_F_NESTED, "", 0);
    put(h, DEVLINK_ATTR_HEALTH_REPORTER_NAME, "fw_fatal", 9);
    uint8_t state = 1;
    put(h, DEVLINK_ATTR_HEALTH_REPORTER_STATE, &state, 1);
    uint64_t errors = 2, recovers = 1, ts = 1764201600123456789ULL, gp = 60000;
    put(h, DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT, &errors, 8);
    put(h, DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT, &recovers, 8);
    put(h, DEVLINK_ATTR_HEALTH_REPORTER_GRACEFUL_PERIOD, &gp, 8);
    put(h, DEVLINK_ATTR_HEALTH_REPORTER_DUMP_TS_NS, &ts, 8);
    nest->nla_len = (unsigned char *)buf + h->nlmsg_len - (unsigned char *)nest;
    dump("REPORTER", h->nlmsg_len);
    return 0;
}
"#;

fn uapi() -> std::collections::HashMap<String, String> {
    uapi::run("/usr/include/linux/devlink.h", PROGRAM)
}

#[path = "support/uapi.rs"]
mod uapi;
use uapi::{hex, unhex};

#[test]
fn constants_are_the_kernel_headers() {
    let u = uapi();
    let pairs: [(&str, u64); 15] = [
        ("GENL_ID_CTRL", devlink::GENL_ID_CTRL.into()),
        ("CTRL_CMD_GETFAMILY", devlink::CTRL_CMD_GETFAMILY.into()),
        ("CTRL_ATTR_FAMILY_ID", devlink::CTRL_ATTR_FAMILY_ID.into()),
        (
            "CTRL_ATTR_FAMILY_NAME",
            devlink::CTRL_ATTR_FAMILY_NAME.into(),
        ),
        ("DEVLINK_GENL_VERSION", devlink::DEVLINK_GENL_VERSION.into()),
        (
            "HEALTH_REPORTER_GET",
            devlink::DEVLINK_CMD_HEALTH_REPORTER_GET.into(),
        ),
        ("BUS_NAME", devlink::DEVLINK_ATTR_BUS_NAME.into()),
        ("DEV_NAME", devlink::DEVLINK_ATTR_DEV_NAME.into()),
        ("PORT_INDEX", devlink::DEVLINK_ATTR_PORT_INDEX.into()),
        (
            "REPORTER_NEST",
            devlink::DEVLINK_ATTR_HEALTH_REPORTER.into(),
        ),
        (
            "REPORTER_NAME",
            devlink::DEVLINK_ATTR_HEALTH_REPORTER_NAME.into(),
        ),
        (
            "REPORTER_STATE",
            devlink::DEVLINK_ATTR_HEALTH_REPORTER_STATE.into(),
        ),
        (
            "REPORTER_ERR_COUNT",
            devlink::DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT.into(),
        ),
        (
            "REPORTER_RECOVER_COUNT",
            devlink::DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT.into(),
        ),
        (
            "REPORTER_DUMP_TS_NS",
            devlink::DEVLINK_ATTR_HEALTH_REPORTER_DUMP_TS_NS.into(),
        ),
    ];
    for (name, ours) in pairs {
        assert_eq!(u[name], ours.to_string(), "{name}");
    }
    assert_eq!(u["DEVLINK_GENL_NAME"], devlink::DEVLINK_GENL_NAME);
    assert_eq!(u["NLM_F_DUMP"], devlink::NLM_F_DUMP.to_string());
}

#[test]
fn requests_are_byte_exact() {
    let u = uapi();
    assert_eq!(hex(&devlink::encode_get_family(7)), u["GETFAMILY"]);
    assert_eq!(hex(&devlink::encode_reporter_dump(27, 8)), u["DUMP"]);
}

#[test]
fn kernel_answers_decode() {
    let u = uapi();
    let family = devlink::decode(&unhex(&u["FAMILY"]), 7, None).unwrap();
    assert_eq!(family.family, Some(27));
    let a = devlink::decode(&unhex(&u["REPORTER"]), 8, Some(27)).unwrap();
    assert_eq!(
        a.reporters,
        vec![devlink::Reporter {
            instance: "pci/0000:03:00.0".into(),
            port: None,
            name: "fw_fatal".into(),
            state: 1,
            errors: 2,
            recovers: 1,
            last_dump_unix: Some(1_764_201_600),
        }]
    );
    assert_eq!(a.end, None, "a dump goes on until NLMSG_DONE");
}
