//! Why a check is not `ok`, as a stable machine-readable code: one per non-ok
//! check result, in `--json`, `/status` and the `rdma_node_agent_check_reason`
//! series, so a fleet can be grouped by it. Codes are never renamed.
//!
//! Each concern declares its own codes, with what they mean and what to do, in
//! its folder's `reasons.rs` (`crate::reasons!`); the registry
//! (`concerns::registry`) collects them, and docs/reasons.md's table is
//! generated from it (`tests/docs.rs` holds that). The engine's own codes,
//! and those more than one concern reports, are declared here.

use serde::{Serialize, Serializer};

/// One reason code and its documentation. Two reasons are the same when their
/// codes are; a code is looked up in the registry when read back from JSON.
#[derive(Debug, Clone, Copy)]
pub struct Reason {
    code: &'static str,
    checks: &'static str,
    means: &'static str,
    remedy: &'static str,
}

impl Reason {
    /// A code with its docs row: the checks that report it, what it means,
    /// what to do. Use `crate::reasons!`, which also lists them for the registry.
    pub const fn new(
        code: &'static str,
        checks: &'static str,
        means: &'static str,
        remedy: &'static str,
    ) -> Self {
        Reason {
            code,
            checks,
            means,
            remedy,
        }
    }

    /// The code as `--json` and the metrics label spell it.
    pub fn as_str(self) -> &'static str {
        self.code
    }

    /// Which checks report it (docs/reasons.md's `checks` column).
    pub fn checks(self) -> &'static str {
        self.checks
    }

    /// What it means.
    pub fn means(self) -> &'static str {
        self.means
    }

    /// What to do.
    pub fn remedy(self) -> &'static str {
        self.remedy
    }
}

/// Declares reason codes as `pub const`s, and `ALL` (or the name given after
/// `list`) listing them in order, for the registry:
///
/// ```
/// rdma_node_agent::reasons! {
///     DEMO_BROKEN = "demo_broken" {
///         checks: "`demo.check`",
///         means: "what went wrong",
///         remedy: "what to do",
///     },
/// }
/// assert_eq!(DEMO_BROKEN.as_str(), "demo_broken");
/// assert_eq!(ALL.len(), 1);
/// ```
#[macro_export]
macro_rules! reasons {
    (list $list:ident; $($name:ident = $code:literal {
        checks: $checks:literal,
        means: $means:literal,
        remedy: $remedy:literal $(,)?
    },)+) => {
        $(
            #[doc = $means]
            pub const $name: $crate::reason::Reason =
                $crate::reason::Reason::new($code, $checks, $means, $remedy);
        )+
        /// Every code declared here, in order: the registry collects them.
        pub const $list: &[$crate::reason::Reason] = &[$($name),+];
    };
    // Inside `impl Reason` (the engine's own): associated consts.
    (assoc $list:ident; $($name:ident = $code:literal {
        checks: $checks:literal,
        means: $means:literal,
        remedy: $remedy:literal $(,)?
    },)+) => {
        $(
            #[doc = $means]
            pub const $name: $crate::reason::Reason =
                $crate::reason::Reason::new($code, $checks, $means, $remedy);
        )+
        /// Every code declared here, in order: the registry collects them.
        pub const $list: &'static [$crate::reason::Reason] = &[$(Self::$name),+];
    };
    ($($rest:tt)+) => {
        $crate::reasons! { list ALL; $($rest)+ }
    };
}

// The engine's codes (any check), and the few that more than one concern reports.
impl Reason {
    crate::reasons! {
        assoc SHARED;
        FACT_UNREADABLE = "fact_unreadable" {
            checks: "every check",
            means: "a fact the check needs could not be read or does not parse (a file, `/proc`, sysfs, a program's output), so the check cannot tell; the message names what",
            remedy: "run the check as root on the host (or `--root` on a full tree); read the named file by hand",
        },
        AGENT_STATE_UNREADABLE = "agent_state_unreadable" {
            checks: "`containerd.memlock`, `kernel.change`",
            means: "the agent's own state (ledger, `kernel.json`) does not parse",
            remedy: "the message names the file: fix or remove it, then `rdma-node-agent apply`",
        },
        DEPENDENCY_UNKNOWN = "dependency_unknown" {
            checks: "`pods.memlock`, `kubelet.devices`, and any check that reads another's facts",
            means: "a check it reads (its concern's `needs()`: `containerd.memlock`, `rdma.devices`) is `unknown` or could not gather its facts, so this one cannot tell either: the engine says so for every concern, and plans nothing from it (the reboot sentinel waits while `rdma.netns` or `kernel.dkms` is unknown); the message names the check and why",
            remedy: "fix what the named check says first",
        },
        PATH_NOT_WRITABLE = "path_not_writable" {
            checks: "any check whose file the last apply could not write (`containerd.memlock`, `systemd.memlock`, …)",
            means: "a file the agent must write is on a file system that is read-only to it; nothing of that apply was written (every file is written beside its target before any is put in place). When the host can write there and only the service's sandbox cannot, the daemon grants its unit that directory (a drop-in, `50-rdma-node-agent-paths.conf`) or, for a directory the unit already grants, restarts itself, at most once per boot; the message says which",
            remedy: "the message names the directory and what was done; if it stayed read-only, `systemctl show -p ReadWritePaths rdma-node-agent`, then create the directory or set the file's path in the agent config, and `systemctl restart rdma-node-agent`",
        },
        CONTAINERD_ABSENT = "containerd_absent" {
            checks: "`containerd.memlock`, `systemd.memlock`",
            means: "`containerd.required` is set and there is no containerd on the node",
            remedy: "install containerd, or unset `containerd.required` on nodes without it",
        },
        MEMLOCK_BELOW_TARGET = "memlock_below_target" {
            checks: "`systemd.memlock`, `pods.memlock`",
            means: "a running process (containerd's main process, or pod containers) has a memlock limit below the target",
            remedy: "restart the unit (apply does it); recreate the named pods (they keep the limit they started with)",
        },
        NO_RDMA_DEVICES = "no_rdma_devices" {
            checks: "`rdma.devices`, `gpudirect.path`",
            means: "no RDMA device where one is expected (`[[rdma.expect_port]]` matches nothing; GPUs required without any RDMA NIC)",
            remedy: "load the driver (`mlx5_core`/`mlx5_ib`), check `dmesg`; correct the expectation",
        },
    }
}

impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
    }
}

impl Eq for Reason {}

impl std::hash::Hash for Reason {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.code.hash(state);
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Reason {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.code.cmp(other.code)
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
