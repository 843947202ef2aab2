//! The reason codes of `rdma.link`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    LINK_FLAPPING = "link_flapping" {
        checks: "`rdma.link`",
        means: "a port went down more than `rdma.flap_threshold` times within `rdma.flap_window`",
        remedy: "cable, optic, switch port (`mlxlink`, `ethtool -S`, `dmesg`); see [rdma.link](checks/rdma.link.md)",
    },
}
