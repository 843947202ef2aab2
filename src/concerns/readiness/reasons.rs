//! The reason codes of `pods.rdma` and `kubelet.devices`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    RDMA_POD_NO_IPC_LOCK = "rdma_pod_no_ipc_lock" {
        checks: "`pods.rdma`",
        means: "a pod container with RDMA devices has no `CAP_IPC_LOCK` in its effective set (NCCL crashes registering memory); the first problem of the first container named",
        remedy: "add `IPC_LOCK` to the container's `securityContext.capabilities`",
    },
    RDMA_POD_LOW_MEMLOCK = "rdma_pod_low_memlock" {
        checks: "`pods.rdma`",
        means: "a pod container with RDMA devices has `RLIMIT_MEMLOCK` below target and no `CAP_IPC_LOCK` to bypass it",
        remedy: "recreate the pod once `containerd.memlock` is ok (it keeps the limit it started with), or add `IPC_LOCK`",
    },
    KUBELET_RESOURCES_ZERO = "kubelet_resources_zero" {
        checks: "`kubelet.devices`",
        means: "the host has ACTIVE RDMA ports, but the kubelet advertises no healthy device of an RDMA resource (or an expected resource has none)",
        remedy: "check the device plugin's DaemonSet, tolerations and operator wait labels; restart it after a kubelet restart",
    },
    KUBELET_RESOURCES_MISMATCH = "kubelet_resources_mismatch" {
        checks: "`kubelet.devices`",
        means: "the kubelet advertises RDMA devices, but every RDMA port of the host is down (or it has none)",
        remedy: "fix the ports (`port_down`), or the plugin's config that advertises them",
    },
    DEVICE_PLUGIN_GONE = "device_plugin_gone" {
        checks: "`kubelet.devices`",
        means: "the kubelet still lists RDMA devices, but no device plugin socket is there",
        remedy: "restart the device plugin",
    },
    KUBELET_CHECKPOINT_INVALID = "kubelet_checkpoint_invalid" {
        checks: "`kubelet.devices`",
        means: "the kubelet's checkpoint does not parse or its checksum does not verify",
        remedy: "a kubelet layout this agent does not know, or corruption: read it by hand",
    },
}
