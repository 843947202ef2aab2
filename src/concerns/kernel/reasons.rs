//! The reason codes of `kernel.change`, `kernel.modules` and `kernel.dkms`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    KERNEL_CHANGED = "kernel_changed" {
        checks: "`kernel.change`",
        means: "the kernel changed since the last recorded run",
        remedy: "`rdma-node-agent apply` re-applies the host preparation (the daemon does it)",
    },
    MODULE_NOT_LOADED = "module_not_loaded" {
        checks: "`kernel.modules`",
        means: "a required module is not loaded, or has no file in `modules.dep`",
        remedy: "`modprobe <module>`; install the kernel's modules package or the OFED build for this kernel",
    },
    MODULE_MISMATCH = "module_mismatch" {
        checks: "`kernel.modules`",
        means: "the module file modprobe would load was built for another kernel (vermagic)",
        remedy: "rebuild it (DKMS) or install the build for the running kernel",
    },
    DKMS_NOT_INSTALLED = "dkms_not_installed" {
        checks: "`kernel.dkms`",
        means: "a DKMS module is not installed for the running kernel",
        remedy: "`dkms autoinstall -k $(uname -r)`",
    },
    DKMS_NOT_INSTALLED_FOR_PENDING_KERNEL = "dkms_not_installed_for_pending_kernel" {
        checks: "`kernel.dkms`",
        means: "a DKMS module is not installed for a newer installed kernel: a reboot into it would lose RDMA",
        remedy: "install that kernel's headers, `dkms autoinstall -k <release>`, before rebooting",
    },
    DKMS_STATUS_DISAGREES = "dkms_status_disagrees" {
        checks: "`kernel.dkms`",
        means: "`dkms status` and `/var/lib/dkms` with `/lib/modules` disagree",
        remedy: "run `dkms status` and compare; a half-removed build",
    },
    DKMS_STATUS_TIMEOUT = "dkms_status_timeout" {
        checks: "`kernel.dkms`",
        means: "the tree shows every build installed, but `dkms status` did not answer within its 10 s, so dkms did not confirm it (`warn`: the tree still answers; a slow tool on a loaded node is not a disagreement)",
        remedy: "run `dkms status` by hand: a lock held by a stuck build, a slow `/usr/src` or `/var/lib/dkms`",
    },
    DKMS_STATUS_FAILED = "dkms_status_failed" {
        checks: "`kernel.dkms`",
        means: "the tree shows every build installed, but `dkms status` could not run or exited non-zero, so dkms did not confirm it (`warn`)",
        remedy: "run `dkms status` by hand and read its error",
    },
}
