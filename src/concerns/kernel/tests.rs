//! The kernel concern's decisions on facts: DKMS states from the tree, every
//! `dkms status` line form, leftovers of removed kernels, release order.

use crate::concerns::kernel::reasons;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::config::KernelConfig;
use super::*;
use crate::engine::check::Status;

#[test]
fn releases_compare_numerically() {
    assert_eq!(
        compare_releases("6.8.0-51-generic", "6.8.0-9-generic"),
        Ordering::Greater
    );
    assert_eq!(
        compare_releases("6.1.0-27-amd64", "6.1.0-27-amd64"),
        Ordering::Equal
    );
    assert_eq!(compare_releases("5.15.0-100", "6.1.0-1"), Ordering::Less);
    assert_eq!(compare_releases("6.10.1", "6.9.12"), Ordering::Greater);
}

const RUNNING: &str = "6.8.0-40-generic";
const NEWER: &str = "6.8.0-51-generic";

fn kernel(release: &str, image: bool, modules: bool) -> InstalledKernel {
    InstalledKernel {
        release: release.into(),
        image: image.then(|| format!("/boot/vmlinuz-{release}")),
        has_modules: modules,
    }
}

fn build(kernel: &str, state: BuildState) -> DkmsBuild {
    DkmsBuild {
        module: "mlnx-ofed-kernel".into(),
        version: "24.10".into(),
        kernel: kernel.into(),
        arch: "x86_64".into(),
        files: vec!["mlx5_ib.ko".into()],
        state,
    }
}

fn facts() -> Facts {
    Facts {
        release: Some(RUNNING.into()),
        boot_id: Some("b1".into()),
        kernels: vec![
            kernel(RUNNING, true, true),
            kernel(NEWER, true, true),
            kernel("6.8.0-31-generic", true, true),
        ],
        dkms_modules: BTreeMap::from([(
            "mlnx-ofed-kernel".to_owned(),
            BTreeSet::from(["24.10".to_owned()]),
        )]),
        dkms: vec![build(RUNNING, BuildState::Installed)],
        ..Facts::default()
    }
}

#[test]
fn a_newer_kernel_without_the_dkms_build_fails_before_the_reboot() {
    let cfg = KernelConfig::default();
    let mut f = facts();
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Fail);
    assert_eq!(
        c.message,
        format!("rebooting into {NEWER} would lose mlnx-ofed-kernel: not built by DKMS")
    );
    assert_eq!(hold_back_reasons(&f, &cfg).len(), 1);
    f.dkms.push(build(NEWER, BuildState::Installed));
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(
        c.message,
        format!("DKMS builds installed for {RUNNING}, {NEWER}")
    );
    assert!(hold_back_reasons(&f, &cfg).is_empty());
}

#[test]
fn a_removed_kernels_leftover_directory_is_no_kernel() {
    let cfg = KernelConfig::default();
    let mut f = facts();
    // `apt remove` left /lib/modules/<v> with depmod's index files only.
    f.kernels[1] = kernel(NEWER, false, false);
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(
        c.message,
        format!(
            "DKMS builds installed for {RUNNING}; /lib/modules/{NEWER} is left over from a \
             removed kernel (no image): ignored"
        )
    );
    assert!(hold_back_reasons(&f, &cfg).is_empty());
    // An image without its module tree cannot boot RDMA either: not a kernel to cover.
    f.kernels[1] = kernel(NEWER, true, false);
    assert!(hold_back_reasons(&f, &cfg).is_empty());
}

#[test]
fn built_but_not_installed_and_installed_but_different_fail() {
    let cfg = KernelConfig::default();
    let mut f = facts();
    f.kernels.truncate(1);
    f.dkms = vec![build(RUNNING, BuildState::Built)];
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Fail);
    assert_eq!(
        c.message,
        format!(
            "mlnx-ofed-kernel for the running kernel {RUNNING}: built by DKMS but not \
             installed: run `dkms install`"
        )
    );
    f.dkms = vec![build(
        RUNNING,
        BuildState::InstalledDiffers(vec!["/lib/modules/x/updates/dkms/mlx5_ib.ko".into()]),
    )];
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.message
            .contains("Diff between built and installed module"),
        "{}",
        c.message
    );
    f.dkms = vec![build(
        RUNNING,
        BuildState::InstalledMissing(vec!["mlx5_ib.ko".into()]),
    )];
    assert!(
        check_dkms(&f, &cfg)
            .message
            .contains("its files are gone from /lib/modules")
    );
}

#[test]
fn every_line_dkms_status_prints() {
    // Forms from /usr/sbin/dkms 3.0.10 (do_status, module_status_built_extra,
    // do_status_weak) and dkms 2's comma form.
    let text = "mlnx-ofed-kernel/24.10, 6.8.0-51-generic, x86_64: installed\n\
        nvidia-peermem/535.183.01, 6.8.0-40-generic, x86_64: installed (WARNING! Diff between built and installed module!)\n\
        gdrdrv/2.4: added\n\
        iser, 24.10, 6.8.0-40-generic, x86_64: built\n\
        knem/1.1.4, 6.8.0-40-generic, x86_64: installed (original_module exists) (WARNING! Missing some built modules!)\n\
        srp, 24.10, 4.18.0-553.el8_10.x86_64, x86_64: installed-weak from 4.18.0-513.el8.x86_64\n\
        Error! Could not locate dkms.conf file.\n\
        \n";
    let st = parse_dkms_status(text);
    let short: Vec<String> = st
        .iter()
        .map(|s| {
            format!(
                "{} {} {:?} {:?} {:?} {:?}",
                s.module, s.version, s.kernel, s.arch, s.state, s.notes
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            "mlnx-ofed-kernel 24.10 Some(\"6.8.0-51-generic\") Some(\"x86_64\") Installed []",
            "nvidia-peermem 535.183.01 Some(\"6.8.0-40-generic\") Some(\"x86_64\") Installed [\"WARNING! Diff between built and installed module!\"]",
            "gdrdrv 2.4 None None Added []",
            "iser 24.10 Some(\"6.8.0-40-generic\") Some(\"x86_64\") Built []",
            "knem 1.1.4 Some(\"6.8.0-40-generic\") Some(\"x86_64\") Installed [\"original_module exists\", \"WARNING! Missing some built modules!\"]",
            "srp 24.10 Some(\"4.18.0-553.el8_10.x86_64\") Some(\"x86_64\") InstalledWeak(\"4.18.0-513.el8.x86_64\") []",
            "  None None Unknown(\"Error! Could not locate dkms.conf file.\") []",
        ]
    );
    assert!(st[1].warns_diff());
    for odd in [
        "x/1: building",
        "x/1, k, a: added",
        "x/1: installed",
        "a b/1: added",
    ] {
        assert!(
            matches!(parse_dkms_status(odd)[0].state, DkmsState::Unknown(_)),
            "{odd}"
        );
    }
}

fn line(kernel: &str, state: DkmsState, notes: &[&str]) -> DkmsLine {
    DkmsLine {
        module: "mlnx-ofed-kernel".into(),
        version: "24.10".into(),
        kernel: Some(kernel.into()),
        arch: Some("x86_64".into()),
        state,
        notes: notes.iter().map(|n| (*n).to_owned()).collect(),
    }
}

#[test]
fn dkms_status_cross_checks_the_tree() {
    let cfg = KernelConfig::default();
    let mut f = facts();
    f.kernels.truncate(1);
    f.dkms_status = Some(Ok(vec![line(RUNNING, DkmsState::Installed, &[])]));
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert!(
        c.message.ends_with("confirmed by dkms status"),
        "{}",
        c.message
    );

    // The tool warns of a diff the tree does not see: a warning naming both.
    f.dkms_status = Some(Ok(vec![line(
        RUNNING,
        DkmsState::Installed,
        &["WARNING! Diff between built and installed module!"],
    )]));
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.contains(&format!(
        "dkms status says mlnx-ofed-kernel/24.10 for {RUNNING} is installed, differing from the build, \
         /var/lib/dkms and /lib/modules say installed"
    )), "{}", c.message);

    // A line it cannot read: unknown, not ok.
    f.dkms_status = Some(Ok(parse_dkms_status(
        "mlnx-ofed-kernel/24.10: frobnicated\n",
    )));
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Unknown);
    assert_eq!(
        c.message,
        "dkms status printed what the agent cannot read: \"mlnx-ofed-kernel/24.10: frobnicated\""
    );

    // It timed out: the tree still answers, but dkms did not confirm it, and
    // a slow tool is no disagreement.
    f.dkms_status = Some(Err(ToolError::TimedOut(
        "dkms did not finish within 10s (killed)".into(),
    )));
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.reason, Some(reasons::DKMS_STATUS_TIMEOUT));
    assert_eq!(
        c.message,
        format!(
            "DKMS builds installed for {RUNNING}, not confirmed by dkms status; dkms status gave no \
             answer (dkms did not finish within 10s (killed)); judged from /var/lib/dkms and /lib/modules alone"
        )
    );
    f.dkms_status = Some(Err(ToolError::Failed(
        "dkms status exited with exit status: 3: locked".into(),
    )));
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.reason, Some(reasons::DKMS_STATUS_FAILED));
    // A gap in the tree still fails, whatever the tool did.
    f.dkms.clear();
    let c = check_dkms(&f, &cfg);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
}

#[test]
fn kernel_change_is_reported_then_recorded() {
    let mut f = facts();
    f.state = Some(KernelState {
        release: "6.8.0-31-generic".into(),
        boot_id: "b0".into(),
        previous: None,
    });
    let c = check_change(&f);
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.message
            .starts_with("kernel changed from 6.8.0-31-generic to 6.8.0-40-generic")
    );
    let s = next_state(&f).unwrap();
    assert_eq!(s.previous.as_deref(), Some("6.8.0-31-generic"));
    f.state = Some(s);
    assert!(next_state(&f).is_none());
    assert!(check_change(&f).message.contains("at this boot"));
    f.boot_id = Some("b2".into());
    let s = next_state(&f).unwrap();
    assert!(s.previous.is_none());
    f.state = Some(s);
    assert_eq!(
        check_change(&f).message,
        "kernel 6.8.0-40-generic, unchanged"
    );
}

/// A state file that does not parse is not a first run.
#[test]
fn corrupt_state_is_unknown_not_a_first_run() {
    let t = tempfile::tempdir().unwrap();
    let host = crate::host::Host::new(t.path());
    std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(
        t.path().join("proc/sys/kernel/osrelease"),
        "6.8.0-40-generic\n",
    )
    .unwrap();
    let state = host.path(&super::state_path());
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    std::fs::write(&state, "{\"release\": \"6.8.0-31-gen").unwrap();
    let f = super::gather::gather(&host.reader(), &KernelConfig::default()).unwrap();
    let c = check_change(&f);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message.contains(&state.display().to_string()),
        "{}",
        c.message
    );
    assert!(!c.message.contains("first run"), "{}", c.message);
    assert!(
        next_state(&f).is_none(),
        "a corrupt record is not overwritten"
    );
}
