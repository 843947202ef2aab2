//! The reason codes of `driver.health`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    DEVLINK_REPORTER_ERROR = "devlink_reporter_error" {
        checks: "`driver.health`",
        means: "a devlink health reporter of an RDMA NIC (or of an instance in `[driver_health] also_watch`) is in `error` state: the driver found a fault it has not recovered from",
        remedy: "`devlink health show <instance> reporter <name>` and `devlink health diagnose`; the driver's recovery, a firmware reset (`devlink dev reload`) or a reboot; see [driver.health](checks/driver.health.md)",
    },
    DEVLINK_ERRORS_RISING = "devlink_errors_rising" {
        checks: "`driver.health`",
        means: "a devlink health reporter counted errors this boot (recovered: the state is healthy again)",
        remedy: "`devlink health show`/`dump show` for what the driver saw; repeated errors: firmware, cable or card",
    },
    DEVLINK_UNAVAILABLE = "devlink_unavailable" {
        checks: "`driver.health`",
        means: "the devlink health reporters could not be read (a kernel without devlink, a socket error), a reporter is in a state the agent does not know, or a watched instance has no reporter",
        remedy: "the message says which; a NIC whose driver registers no reporter is watched through the kernel log only",
    },
    DRIVER_FATAL_LOG = "driver_fatal_log" {
        checks: "`driver.health`",
        means: "the kernel log since boot holds an mlx5 fatal message for a NIC (fatal error detected, health poll missed, firmware command timeout)",
        remedy: "the NIC's firmware or card failed this boot: `dmesg`, `devlink health`, then a reboot or a card swap; counts reset at reboot",
    },
    DRIVER_LOG_WARNING = "driver_log_warning" {
        checks: "`driver.health`",
        means: "the kernel log since boot holds an mlx5 firmware health syndrome that is not (yet) fatal",
        remedy: "watch for a fatal message after it; `mlxfwmanager`, firmware release notes",
    },
    KERNEL_LOG_UNREADABLE = "kernel_log_unreadable" {
        checks: "`driver.health`",
        means: "the kernel log (`/dev/kmsg`) could not be read to its end (permission, a unit without the grant, or a pass over its caps)",
        remedy: "run under the shipped unit (it grants `/dev/kmsg` read-only and CAP_SYSLOG), or raise `[driver_health] kernel_log_max_bytes`; `kernel_log = false` turns the part off",
    },
}
