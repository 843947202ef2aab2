//! The reason codes of `rdma.devices`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    NO_ACTIVE_PORT = "no_active_port" {
        checks: "`rdma.devices`",
        means: "RDMA devices are present, but no port is ACTIVE: the node cannot run RDMA jobs",
        remedy: "cabling, switch, subnet manager (`ibstat`, `rdma link show`)",
    },
    PORT_DOWN = "port_down" {
        checks: "`rdma.devices`",
        means: "a port the kernel says is DOWN (no physical link)",
        remedy: "cable, transceiver, switch port; list it in `rdma.ignore_ports` when it is down by design",
    },
    PORT_NOT_ACTIVE = "port_not_active" {
        checks: "`rdma.devices`",
        means: "a port up but not ACTIVE (INIT, ARMED: an InfiniBand port waiting for its subnet manager)",
        remedy: "check the subnet manager (`sminfo`), the port's partition",
    },
    PORT_RATE_BELOW_EXPECTED = "port_rate_below_expected" {
        checks: "`rdma.devices`",
        means: "a port runs below `min_rate_gbps`",
        remedy: "reseat or replace the cable/optic; check both ends' speed settings",
    },
    TOO_FEW_ACTIVE_PORTS = "too_few_active_ports" {
        checks: "`rdma.devices`",
        means: "fewer ACTIVE ports of a link layer than `[rdma.min_active_ports]` asks",
        remedy: "as `port_down` for the ports that are not ACTIVE",
    },
    DEVICE_WITHOUT_PORTS = "device_without_ports" {
        checks: "`rdma.devices`",
        means: "a device with no `ports/` entries",
        remedy: "a driver that failed to probe: `dmesg`, reload the driver",
    },
    DEVICE_BROKEN_LINK = "device_broken_link" {
        checks: "`rdma.devices`",
        means: "a device whose sysfs link points at nothing",
        remedy: "a driver half unbound: reload it or reboot",
    },
    GPUDIRECT_MODULE_MISSING = "gpudirect_module_missing" {
        checks: "`rdma.devices`",
        means: "a GPUDirect module of `[gpudirect] required_modules` is not loaded while NVIDIA GPUs are present",
        remedy: "`modprobe nvidia_peermem` (or `gdrdrv`), and load it at boot",
    },
}
