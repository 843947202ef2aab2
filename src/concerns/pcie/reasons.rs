//! The reason codes of `pcie.aer`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    AER_FATAL = "aer_fatal" {
        checks: "`pcie.aer`",
        means: "a fatal PCIe AER error since boot on a function of an RDMA NIC's or GPU's path, or fatal messages its root port received",
        remedy: "drain the node; `dmesg` for the AER report; reseat or replace the card, riser or cable; reboot; see [pcie.aer](checks/pcie.aer.md)",
    },
    AER_NONFATAL = "aer_nonfatal" {
        checks: "`pcie.aer`",
        means: "an uncorrectable non-fatal AER error since boot on such a function (warn by default, fail with `[pcie] nonfatal = \"fail\"`)",
        remedy: "`dmesg` for the error: a one-off `UnsupReq` from a probe is benign, repeated completion timeouts are not",
    },
    AER_CORRECTABLE_RISING = "aer_correctable_rising" {
        checks: "`pcie.aer`",
        means: "a function's correctable AER errors rose by more than `pcie.correctable_threshold` within `pcie.correctable_window`",
        remedy: "a marginal link: reseat or replace the card, riser or cable; `lspci -vvv`",
    },
    PCIE_LINK_RETRAINED_DOWN = "pcie_link_retrained_down" {
        checks: "`pcie.aer`",
        means: "a function's PCIe link runs slower or narrower than it trained earlier this boot",
        remedy: "the same hardware checks; a reboot retrains it",
    },
    AER_UNAVAILABLE = "aer_unavailable" {
        checks: "`pcie.aer`",
        means: "a watched function has no AER statistics (no AER capability, a kernel without `CONFIG_PCIEAER`, or `pci=noaer`): its errors are not known",
        remedy: "a kernel with `CONFIG_PCIEAER=y`, without `pci=noaer`",
    },
}
