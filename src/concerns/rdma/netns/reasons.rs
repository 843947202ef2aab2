//! The reason codes of `rdma.netns`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    NETNS_UNSUPPORTED = "netns_unsupported" {
        checks: "`rdma.netns`",
        means: "the kernel is older than 5.3 and no MLNX_OFED 4.7+ is found: no RDMA netns modes",
        remedy: "upgrade the kernel or OFED, or set `rdma.netns_mode = \"unmanaged\"`",
    },
    NETNS_PLUGIN_CONFLICT = "netns_plugin_conflict" {
        checks: "`rdma.netns`",
        means: "exclusive mode is wanted while the RDMA shared device plugin runs (`rdma.shared_plugin = \"refuse\"`)",
        remedy: "remove the shared plugin, or set `rdma.shared_plugin = \"warn\"`",
    },
    NETNS_MODE_MISMATCH = "netns_mode_mismatch" {
        checks: "`rdma.netns`",
        means: "the live mode is not the configured one, and nothing prevents switching",
        remedy: "`rdma-node-agent apply`",
    },
    NETNS_BUSY = "netns_busy" {
        checks: "`rdma.netns`",
        means: "the live mode is not the configured one, and the kernel refuses to switch while other network namespaces exist: pending reboot",
        remedy: "reboot the node (kured with `rdma.reboot_sentinel`)",
    },
    NETNS_NOT_PERSISTED = "netns_not_persisted" {
        checks: "`rdma.netns`",
        means: "the mode is not persisted in the agent's modprobe.d file (or the kernel command line lacks it with `check_cmdline`)",
        remedy: "`rdma-node-agent apply`; add `ib_core.netns_mode=` to the boot loader for `check_cmdline`",
    },
    NETNS_INITRAMFS_STALE = "netns_initramfs_stale" {
        checks: "`rdma.netns`",
        means: "ib_core loads from an initramfs that lacks the modprobe.d file: the next boot keeps the old mode",
        remedy: "`update-initramfs -u` / `dracut -f`, or `rdma.initramfs = \"rebuild\"`",
    },
}
