//! The reason codes of `systemd.memlock`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    DROPIN_MISSING = "dropin_missing" {
        checks: "`systemd.memlock`",
        means: "the `LimitMEMLOCK=` drop-in for containerd's unit is missing or differs",
        remedy: "`rdma-node-agent apply`",
    },
    DAEMON_RELOAD_PENDING = "daemon_reload_pending" {
        checks: "`systemd.memlock`",
        means: "the drop-in is in place but systemd has not loaded it",
        remedy: "`systemctl daemon-reload` (apply does it)",
    },
    UNIT_NOT_ACTIVE = "unit_not_active" {
        checks: "`systemd.memlock`",
        means: "containerd's unit is not active",
        remedy: "`systemctl status <unit>`; start it",
    },
}
