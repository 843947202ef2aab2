//! The reason codes of `containerd.memlock` and `containerd.nri`, with what each means and what to do
//! (docs/reasons.md is generated from them). Codes are a contract: never
//! renamed or reused.

crate::reasons! {
    CONFIG_UNREADABLE = "config_unreadable" {
        checks: "`containerd.memlock`",
        means: "containerd's config cannot be read as containerd would (syntax, unknown version, a value where a table belongs, an import that fails, a v1 file with v2 sections, a base spec that does not parse)",
        remedy: "fix the named file; the agent does not guess what it means",
    },
    HANDLER_NOT_DEFINED = "handler_not_defined" {
        checks: "`containerd.memlock`",
        means: "a handler of `containerd.handlers` is not defined in containerd's config",
        remedy: "define the runtime handler in containerd's config, or remove it from `containerd.handlers`",
    },
    CRI_DISABLED = "cri_disabled" {
        checks: "`containerd.memlock`",
        means: "containerd's CRI plugin is disabled (`disabled_plugins`): it serves no pods",
        remedy: "remove the CRI plugin from `disabled_plugins` on a node that runs pods (`fail` when the kubelet's endpoint is this containerd)",
    },
    NO_BASE_SPEC = "no_base_spec" {
        checks: "`containerd.memlock`",
        means: "the agent's base spec is not in place: runtime handlers do not point at a base spec with the target memlock",
        remedy: "`rdma-node-agent apply` (the daemon in enforce mode does it)",
    },
    BASE_SPEC_NOT_APPLIED = "base_spec_not_applied" {
        checks: "`containerd.memlock`",
        means: "the files are in place, but containerd's own view (`config dump`, CRI `Status`) does not give every handler the target memlock",
        remedy: "read the message (which handler, which spec); another config or import overrides the agent's",
    },
    CONTAINERD_UNCONFIRMED = "containerd_unconfirmed" {
        checks: "`containerd.memlock`",
        means: "containerd could not be asked (no binary to dump its config, CRI socket not answering)",
        remedy: "check containerd is installed and its socket answers (`ctr version`)",
    },
    CONTAINERD_NOT_RESTARTED = "containerd_not_restarted" {
        checks: "`containerd.memlock`",
        means: "containerd has not restarted since its config changed: new containers get the old limit",
        remedy: "restart containerd (the daemon in enforce mode does it)",
    },
    CONTAINERD_NOT_RUNNING = "containerd_not_running" {
        checks: "`containerd.memlock`",
        means: "configured, confirmed by its config, but containerd is not running",
        remedy: "start containerd",
    },
    HANDLER_UNMANAGED = "handler_unmanaged" {
        checks: "`containerd.memlock`",
        means: "CRI can use handlers that are not in `containerd.handlers` and lack the memlock",
        remedy: "add them to `containerd.handlers`, or leave `containerd.handlers` empty (every Linux handler)",
    },
    CONTAINERD_CONFIG_WARNING = "containerd_config_warning" {
        checks: "`containerd.memlock`",
        means: "prepared and confirmed, with a warning about containerd's config (named in the message)",
        remedy: "read the warning",
    },
    NRI_UNAVAILABLE = "nri_unavailable" {
        checks: "`containerd.nri`",
        means: "`memlock_via` is `\"nri\"` or `\"both\"` and containerd's NRI socket does not take plugins (NRI off, as in containerd 1.7, or absent, as in 1.6)",
        remedy: "enable NRI in containerd (`[plugins.\"io.containerd.nri.v1.nri\"] disable = false`, on by default in 2.x) and restart it, or set `memlock_via = \"base-spec\"`",
    },
    NRI_PLUGIN_NOT_RUNNING = "nri_plugin_not_running" {
        checks: "`containerd.nri`",
        means: "containerd takes NRI plugins, but the agent's daemon (which runs the plugin) is not running",
        remedy: "`systemctl start rdma-node-agent`",
    },
    NRI_PLUGIN_NOT_REGISTERED = "nri_plugin_not_registered" {
        checks: "`containerd.nri`",
        means: "the daemon runs, but its NRI plugin is not registered with containerd (the message has containerd's last error)",
        remedy: "read the error; containerd's journal (`journalctl -u containerd`) says why it refused or closed the plugin",
    },
    NRI_BASE_SPEC_UNKNOWN = "nri_base_spec_unknown" {
        checks: "`containerd.nri`",
        means: "the plugin is registered, but some RDMA containers were not raised because their runtime handler's base spec was not known to the daemon (it may set a lower RLIMIT_MEMLOCK the agent must keep), so they run with containerd's default",
        remedy: "the agent's log names the containers; check that containerd's config and the handler's base spec are readable (`rdma-node-agent check --only containerd.memlock`), then recreate those pods",
    },
}
