//! The config's parse, routing and checks, on the agent's registry.

use super::*;
use crate::concerns::registry::SECTIONS;
use crate::host::limit::Limit;
use std::collections::BTreeSet;

#[test]
fn limits_parse() {
    assert_eq!(Limit::parse("unlimited"), Ok(Limit::UNLIMITED));
    assert_eq!(Limit::parse("infinity"), Ok(Limit::UNLIMITED));
    assert_eq!(Limit::parse("4MiB"), Ok(Limit(4 << 20)));
    assert_eq!(Limit::parse("4M"), Ok(Limit(4 << 20)));
    assert_eq!(Limit::parse("65536"), Ok(Limit(65536)));
    assert!(Limit::parse("4MB").unwrap_err().contains("decimal"));
    assert!(Limit::parse("lots").is_err());
    assert!(Limit::parse("99999999999TiB").is_err());
    assert_eq!(Limit(4 << 20).to_string(), "4MiB");
    assert_eq!(Limit::UNLIMITED.to_string(), "unlimited");
    assert_eq!(Limit(1000).to_string(), "1000 bytes");
}

/// Every table the parser accepts (it names them when it refuses a key) is
/// the agent's own section or a registered one, each once, so validation
/// reaches it: a section none registered is refused, not read unchecked.
#[test]
fn every_section_the_parser_accepts_is_validated() {
    let e = Config::parse("probe_ = 0\n", Path::new("c.toml"), SECTIONS).unwrap_err();
    let e = e.to_string();
    let expected = e.split_once("expected").expect("the fields it expects").1;
    let tables: Vec<&str> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|k| *k != "mode") // the one top-level key that is not a table
        .collect();
    let cfg = Config::default();
    let mut validated: Vec<&str> = cfg.agent_sections().iter().map(|s| s.name()).collect();
    validated.extend(SECTIONS.iter().map(|s| s.name()));
    assert_eq!(
        tables, validated,
        "a [section] that is parsed but not validated"
    );
    let unique: BTreeSet<&str> = validated.iter().copied().collect();
    assert_eq!(unique.len(), validated.len(), "a section twice");
    // Without the registry, a concern's table is an unknown one.
    let e = Config::parse("[pcie]\nenabled = false\n", Path::new("c.toml"), &[]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("c.toml:1:1: unknown field `pcie`"),
        "{e}"
    );
}

/// A concern's section is read, validated and located like the agent's own.
#[test]
fn a_registered_section_is_routed_validated_and_located() {
    use crate::concerns::pcie::config::PcieConfig;
    let c = Config::parse("[pcie]\nenabled = false\n", Path::new("c.toml"), SECTIONS).unwrap();
    assert!(!c.section::<PcieConfig>().enabled);
    assert_ne!(c, Config::default());
    assert!(Config::default().section::<PcieConfig>().enabled);
    let e = Config::parse(
        "[daemon]\n[pcie]\n  correctable_threshold = 0\n",
        Path::new("c.toml"),
        SECTIONS,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("c.toml:3:3: correctable_threshold under [pcie]: must be at least 1"),
        "{e}"
    );
    let e = Config::parse("[pcie]\nenabld = true\n", Path::new("c.toml"), SECTIONS)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:2:1: unknown field `enabld`"), "{e}");
    let e = Config::parse("[pcei]\n", Path::new("c.toml"), SECTIONS)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown field `pcei` (did you mean `pcie`?)"),
        "{e}"
    );
}

#[test]
fn defaults_when_empty() {
    let c = Config::parse("", Path::new("c.toml"), SECTIONS).unwrap();
    assert_eq!(c, Config::default());
    assert!(c.containerd.memlock.is_unlimited());
}

#[test]
fn full_config() {
    let c = Config::parse(
        r#"
[containerd]
memlock = "4MiB"
handlers = ["runc", "nvidia"]
[containerd.rlimits]
RLIMIT_NOFILE = 1048576
[pods]
below_target = "fail"
"#,
        Path::new("c.toml"),
        SECTIONS,
    )
    .unwrap();
    assert_eq!(c.containerd.memlock, Limit(4 << 20));
    assert_eq!(c.containerd.handlers, vec!["runc", "nvidia"]);
    assert_eq!(c.pods.below_target, Severity::Fail);
    assert_eq!(c.containerd.rlimits.len(), 1);
}

#[test]
fn unknown_key_names_key_line_and_column() {
    let e = Config::parse(
        "[containerd]\nmemlok = \"4MiB\"\n",
        Path::new("/x/c.toml"),
        SECTIONS,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("/x/c.toml:2:1: "), "{e}");
    assert!(e.contains("memlok"), "{e}");
}

#[test]
fn bad_values_are_located() {
    let e = Config::parse(
        "[containerd]\nmemlock = \"4MB\"\n",
        Path::new("c.toml"),
        SECTIONS,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("c.toml:2:11: "), "{e}");
    assert!(e.contains("decimal"), "{e}");
    let e = Config::parse(
        "[containerd.rlimits]\nRLIMIT_MEMLOCK = 1\n",
        Path::new("c.toml"),
        SECTIONS,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("containerd.memlock"), "{e}");
}

#[test]
fn each_section_refuses_values_it_cannot_use() {
    let err = |text: &str| {
        Config::parse(text, Path::new("c.toml"), SECTIONS)
            .unwrap_err()
            .to_string()
    };
    let cases = [
        (
            "[daemon]\ninterval_secs = 0\n",
            "c.toml:2:1: interval_secs under [daemon]",
        ),
        (
            "[rdma]\n  modprobe_file = \"/etc/modprobe.d/rdma\"\n",
            "c.toml:2:3: modprobe_file under [rdma]: /etc/modprobe.d/rdma must end in .conf",
        ),
        (
            "[systemd]\ndropin = \"50-x\"\n",
            "c.toml:2:1: dropin under [systemd]",
        ),
        (
            "[http]\nlisten = \"localhost\"\n",
            "c.toml:2:1: listen under [http]",
        ),
        (
            "[nfd]\npath = \"features.d/x\"\n",
            "c.toml:2:1: path under [nfd]",
        ),
        (
            "[containerd]\nunit = \"containerd\"\n",
            "c.toml:2:1: unit under [containerd]",
        ),
        (
            "[kernel]\nrequired_modules = [\"ib core\"]\n",
            "c.toml:2:1: required_modules under [kernel]",
        ),
        (
            "[gpudirect]\nrequired_gpus = [\"0000:1B:00.0\"]\n",
            "c.toml:2:1: required_gpus under [gpudirect]",
        ),
        (
            "[kubelet]\ndevice_plugins_dir = \"plugins\"\n",
            "c.toml:2:1: device_plugins_dir under [kubelet]",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
    // The shipped defaults pass every section's checks.
    Config::parse("", Path::new("c.toml"), SECTIONS).unwrap();
    let ok =
        "[gpudirect]\nrequired_gpus = [\"0000:1b:00.0\"]\n[http]\nlisten = \"unix:/run/x.sock\"\n";
    Config::parse(ok, Path::new("c.toml"), SECTIONS).unwrap();
}

/// One place says GPUDirect is required: the old `[rdma]` key still loads,
/// as the `[gpudirect]` one, with a warning that says what to write.
#[test]
fn the_old_gpudirect_key_loads_as_the_new_one_with_a_warning() {
    use rdma::GpuDirectModule::{Gdrdrv, NvidiaPeermem};
    let old = "[rdma]\ngpudirect_required = [\"nvidia_peermem\", \"gdrdrv\"]\n";
    let c = Config::parse(old, Path::new("/etc/rdma-node-agent/config.toml"), SECTIONS).unwrap();
    assert_eq!(c.gpudirect.required_modules, [NvidiaPeermem, Gdrdrv]);
    assert_eq!(c.rdma.gpudirect_required, None);
    assert_eq!(
        c.warnings,
        [
            "/etc/rdma-node-agent/config.toml: `gpudirect_required` under [rdma] is no longer read; it is taken as `required_modules = [\"nvidia_peermem\", \"gdrdrv\"]` under [gpudirect], the one place that says GPUDirect is required: write that there instead, and delete the line under [rdma]"
        ]
    );
    // What the warning says to write means the same, with no warning.
    let new = "[gpudirect]\nrequired_modules = [\"nvidia_peermem\", \"gdrdrv\"]\n";
    let n = Config::parse(new, Path::new("c.toml"), SECTIONS).unwrap();
    assert_eq!(n.gpudirect, c.gpudirect);
    assert!(n.warnings.is_empty());
    // Both, differing: the new key wins, the old line is to go.
    let both = format!("{old}[gpudirect]\nrequired_modules = [\"gdrdrv\"]\n");
    let b = Config::parse(&both, Path::new("c.toml"), SECTIONS).unwrap();
    assert_eq!(b.gpudirect.required_modules, [Gdrdrv]);
    assert!(
        b.warnings[0]
            .contains("is no longer read: `required_modules = [\"gdrdrv\"]` under [gpudirect]"),
        "{:?}",
        b.warnings
    );
}
