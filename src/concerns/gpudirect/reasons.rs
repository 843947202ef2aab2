//! The reason codes of `gpudirect.path`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    NO_GPU = "no_gpu" {
        checks: "`gpudirect.path`",
        means: "`[gpudirect] required = true` and no NVIDIA GPU on the PCI bus",
        remedy: "check the GPU is seen (`lspci`), or unset `required` on nodes without GPUs",
    },
    ACS_REDIRECT = "acs_redirect" {
        checks: "`gpudirect.path`",
        means: "a PCIe bridge between a GPU and its NIC redirects peer traffic (ACS): GPUDirect RDMA goes through the root complex",
        remedy: "disable ACS redirect on the bridges (`setpci`, BIOS), as NVIDIA's GPUDirect docs describe",
    },
    PCIE_LINK_DEGRADED = "pcie_link_degraded" {
        checks: "`gpudirect.path`",
        means: "a PCIe link on a GPU↔NIC path trained below what both ends support",
        remedy: "reseat the card or riser; check BIOS link settings",
    },
    GPU_NIC_DISTANCE = "gpu_nic_distance" {
        checks: "`gpudirect.path`",
        means: "a GPU and its nearest NIC are only connected through the host bridge or further: NCCL does not use GPUDirect RDMA there by default",
        remedy: "a topology fact: place NICs beside GPUs, or set NCCL's `NCCL_NET_GDR_LEVEL` knowingly",
    },
    GPUDIRECT_NO_MECHANISM = "gpudirect_no_mechanism" {
        checks: "`gpudirect.path`",
        means: "neither `nvidia_peermem` nor DMA-BUF can register GPU memory with the NIC",
        remedy: "load `nvidia_peermem` with MLNX_OFED/DOCA-OFED, or use the open GPU kernel modules on a kernel with `CONFIG_PCI_P2PDMA=y`",
    },
}
