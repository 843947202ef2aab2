//! The kernel concern through the real binary, on node trees made of real
//! artefacts (scripts/fixtures/fetch-artefacts.sh): Debian's linux-image cloud
//! kernels (images, real .ko modules, compressed here with the real xz and
//! zstd), modules.dep written by the real depmod, and a module built and
//! installed by Debian's real dkms in each state `dkms status` tells apart,
//! with what `dkms status` printed for it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use rdma_node_agent::concerns::kernel::{DkmsState, parse_dkms_status};
use support::*;

const REQUIRED: &[&str] = &["ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm"];

struct Kernels {
    old: String,
    new: String,
    pkg: Vec<(String, PathBuf)>,
    dkms: PathBuf,
}

fn kernels() -> Option<Kernels> {
    let pkg = artefacts::kernels()?;
    let dkms = artefacts::dir()?.join("dkms");
    Some(Kernels {
        old: pkg[0].0.clone(),
        new: pkg[1].0.clone(),
        pkg,
        dkms,
    })
}

fn cp(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
}

fn depmod(root: &Path, release: &str) {
    let st = Command::new("depmod")
        .arg("-b")
        .arg(root)
        .arg(release)
        .status()
        .expect("depmod (kmod) is needed");
    assert!(st.success());
}

impl Kernels {
    fn package(&self, release: &str) -> &Path {
        &self.pkg.iter().find(|(r, _)| r == release).unwrap().1
    }

    /// A kernel as its package installs it, reduced to what the checks read:
    /// the image, the required modules and their dependencies, depmod's files.
    fn install(&self, root: &Path, release: &str) {
        let pkg = self.package(release);
        let boot = format!("boot/vmlinuz-{release}");
        cp(&pkg.join(&boot), &root.join(&boot));
        let mods = format!("lib/modules/{release}");
        let dep = std::fs::read_to_string(pkg.join(&mods).join("modules.dep")).unwrap();
        for line in dep.lines() {
            let (file, deps) = line.split_once(':').unwrap();
            let name = file
                .rsplit('/')
                .next()
                .unwrap()
                .trim_end_matches(".ko")
                .replace('-', "_");
            if REQUIRED.contains(&name.as_str()) {
                for f in std::iter::once(file).chain(deps.split_whitespace()) {
                    cp(&pkg.join(&mods).join(f), &root.join(&mods).join(f));
                }
            }
        }
        for f in [
            "modules.order",
            "modules.builtin",
            "modules.builtin.modinfo",
        ] {
            cp(&pkg.join(&mods).join(f), &root.join(&mods).join(f));
        }
        depmod(root, release);
    }

    /// What `apt remove` leaves: depmod's index files, no image, no modules.
    fn leftover(&self, root: &Path, release: &str) {
        let mods = format!("lib/modules/{release}");
        for f in [
            "modules.dep",
            "modules.alias",
            "modules.symbols",
            "modules.order",
        ] {
            cp(
                &self.package(release).join(&mods).join(f),
                &root.join(&mods).join(f),
            );
        }
    }

    /// The DKMS tree and installed files of one real dkms scenario, then depmod.
    fn dkms(&self, root: &Path, scenario: &str) -> String {
        let s = self.dkms.join(scenario);
        copy_tree(&s.join("var/lib/dkms"), &root.join("var/lib/dkms"));
        for (k, _) in &self.pkg {
            let updates = s.join("lib/modules").join(k).join("updates");
            if updates.exists() && root.join("lib/modules").join(k).exists() {
                copy_tree(&updates, &root.join("lib/modules").join(k).join("updates"));
                depmod(root, k);
            }
        }
        std::fs::read_to_string(s.join("dkms-status.txt")).unwrap()
    }

    fn node(&self, running: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(
            r,
            "/etc/rdma-node-agent/config.toml",
            "[containerd]\nenabled = false\n\n[systemd]\nenabled = false\n",
        );
        write(r, "/proc/sys/kernel/osrelease", &format!("{running}\n"));
        write(
            r,
            "/proc/sys/kernel/random/boot_id",
            "0f2c7c7e-7d1e-4a8e-9d55-1b6c9b1f0a01\n",
        );
        let loaded: String = REQUIRED
            .iter()
            .map(|m| format!("{m} 1454080 3 - Live 0x0000000000000000\n"))
            .collect();
        write(r, "/proc/modules", &loaded);
        t
    }
}

fn kernel_check(root: &Path, id: &str) -> (i32, serde_json::Value) {
    let o = agent(root, &["check", "--json", "--only", id]);
    (o.status.code().unwrap(), json(&o)["checks"][0].clone())
}

#[test]
fn an_installed_kernel_is_its_image_and_modules_not_a_leftover_directory() {
    let Some(k) = kernels() else { return };
    let t = k.node(&k.old);
    let r = t.path();
    k.install(r, &k.old);
    k.leftover(r, &k.new);
    k.dkms(r, "older-only");
    let (code, c) = kernel_check(r, "kernel.dkms");
    assert_eq!(code, 0, "{c}");
    assert_eq!(
        c["message"],
        format!(
            "DKMS builds installed for {}; /lib/modules/{} is left over from a removed kernel \
             (no image): ignored",
            k.old, k.new
        )
    );
    // Installing the newer kernel for real makes its missing install a failure.
    k.install(r, &k.new);
    let (code, c) = kernel_check(r, "kernel.dkms");
    assert_eq!(code, 1, "{c}");
    assert_eq!(
        c["message"],
        format!(
            "rebooting into {} would lose rdma-probe: built by DKMS but not installed: run `dkms install`",
            k.new
        )
    );
}

/// Under `--root` the agent tells from the tree what the real `dkms status` said.
#[test]
fn dkms_states_from_the_tree_agree_with_real_dkms_status() {
    let Some(k) = kernels() else { return };
    let cases = [
        (
            "built",
            1,
            format!(
                "rdma-probe for the running kernel {}: built by DKMS but not installed: run `dkms install`; \
                 rebooting into {} would lose rdma-probe: built by DKMS but not installed: run `dkms install`",
                k.old, k.new
            ),
        ),
        (
            "installed",
            0,
            format!("DKMS builds installed for {}, {}", k.old, k.new),
        ),
        (
            "older-only",
            1,
            format!(
                "rebooting into {} would lose rdma-probe: built by DKMS but not installed: run `dkms install`",
                k.new
            ),
        ),
        (
            "differs",
            1,
            format!(
                "rebooting into {} would lose rdma-probe: installed, but the kernel's copy differs \
                 from the DKMS build (dkms: Diff between built and installed module): run `dkms install --force`",
                k.new
            ),
        ),
    ];
    for (scenario, want_code, want) in cases {
        let t = k.node(&k.old);
        let r = t.path();
        k.install(r, &k.old);
        k.install(r, &k.new);
        let status = k.dkms(r, scenario);
        let (code, c) = kernel_check(r, "kernel.dkms");
        assert_eq!(
            (code, c["message"].as_str().unwrap()),
            (want_code, want.as_str()),
            "{scenario}: {c}"
        );
        // Every line of the real tool's output is understood, and the tree agrees with it.
        for line in parse_dkms_status(&status) {
            let build = c["details"]["builds"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| Some(b["kernel"].as_str().unwrap()) == line.kernel.as_deref())
                .unwrap_or_else(|| panic!("{scenario}: no build for {line:?}"));
            let tree = build["state"]["state"].as_str().unwrap();
            let tool = match (&line.state, line.warns_diff()) {
                (DkmsState::Installed, true) => "installed_differs",
                (DkmsState::Installed, false) => "installed",
                (DkmsState::Built, _) => "built",
                other => panic!("{scenario}: unexpected {other:?}"),
            };
            assert_eq!(tree, tool, "{scenario}: {status}");
        }
    }
}

#[test]
fn the_file_modprobe_loads_is_depmods_choice() {
    let Some(k) = kernels() else { return };
    let t = k.node(&k.new);
    let r = t.path();
    k.install(r, &k.new);
    let (code, c) = kernel_check(r, "kernel.modules");
    assert_eq!(code, 0, "{c}");
    assert_eq!(
        c["message"],
        format!(
            "ib_core, ib_uverbs, mlx5_core, mlx5_ib, rdma_ucm loaded, files match {}",
            k.new
        )
    );
    let mlx5_ib = &c["details"]["modules"][3]["resolved"]["file"];
    assert_eq!(
        mlx5_ib["path"],
        "kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko"
    );
    assert_eq!(mlx5_ib["built_for"]["Ok"], k.new.as_str());

    // The older kernel's mlx5_ib dropped into updates/: until depmod runs,
    // modules.dep still names the in-tree file, and that is what loads.
    let stale = r.join(format!("lib/modules/{}/updates/mlx5_ib.ko", k.new));
    cp(
        &k.package(&k.old).join(format!(
            "lib/modules/{}/kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko",
            k.old
        )),
        &stale,
    );
    assert_eq!(kernel_check(r, "kernel.modules").0, 0);
    depmod(r, &k.new);
    let (code, c) = kernel_check(r, "kernel.modules");
    assert_eq!(code, 1, "{c}");
    assert_eq!(
        c["message"],
        format!(
            "mlx5_ib: updates/mlx5_ib.ko was built for {}, not {} (vermagic mismatch)",
            k.old, k.new
        )
    );
    assert_eq!(
        c["details"]["modules"][3]["resolved"]["file"]["shadows"],
        "kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko"
    );
    std::fs::remove_file(&stale).unwrap();

    // Without modules.dep nothing says which file would load: unknown.
    std::fs::remove_file(r.join(format!("lib/modules/{}/modules.dep", k.new))).unwrap();
    let (code, c) = kernel_check(r, "kernel.modules");
    assert_eq!(code, 2, "{c}");
    assert_eq!(c["status"], "unknown");
}

#[test]
fn compressed_real_modules_are_read() {
    let Some(k) = kernels() else { return };
    let t = k.node(&k.new);
    let r = t.path();
    k.install(r, &k.new);
    let ib = r.join(format!("lib/modules/{}/kernel/drivers/infiniband", k.new));
    // xz replaces the file by default; zstd keeps it unless told.
    for (tool, args, file) in [
        ("xz", &["-q"][..], "core/ib_core.ko"),
        ("zstd", &["-q", "--rm"][..], "hw/mlx5/mlx5_ib.ko"),
    ] {
        let st = Command::new(tool)
            .args(args)
            .arg(ib.join(file))
            .status()
            .unwrap_or_else(|e| panic!("{tool}: {e} (install xz-utils / zstd)"));
        assert!(st.success());
    }
    depmod(r, &k.new);
    let (code, c) = kernel_check(r, "kernel.modules");
    assert_eq!(code, 0, "{c}");
    let m = &c["details"]["modules"];
    assert_eq!(
        m[0]["resolved"]["file"]["path"],
        "kernel/drivers/infiniband/core/ib_core.ko.xz"
    );
    assert_eq!(m[0]["resolved"]["file"]["built_for"]["Ok"], k.new.as_str());
    assert_eq!(
        m[3]["resolved"]["file"]["path"],
        "kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko.zst"
    );
    assert_eq!(m[3]["resolved"]["file"]["built_for"]["Ok"], k.new.as_str());
}

#[test]
fn a_kernel_change_is_reported_then_recorded_by_apply() {
    let Some(k) = kernels() else { return };
    let t = k.node(&k.old);
    let r = t.path();
    k.install(r, &k.old);
    k.install(r, &k.new);
    k.dkms(r, "installed");
    let (_, c) = kernel_check(r, "kernel.change");
    assert_eq!(
        c["message"],
        format!("kernel {}; first run, nothing to compare with", k.old)
    );
    assert_eq!(agent(r, &["apply"]).status.code(), Some(0));
    write(r, "/proc/sys/kernel/osrelease", &format!("{}\n", k.new));
    write(
        r,
        "/proc/sys/kernel/random/boot_id",
        "7a1b2c3d-0000-4000-8000-000000000002\n",
    );
    let (code, c) = kernel_check(r, "kernel.change");
    assert_eq!(code, 0, "a change is a warning, not a failure");
    assert_eq!(c["status"], "warn");
    let o = agent(r, &["apply"]);
    assert!(
        stderr(&o).contains(&format!(
            "kernel changed from {} to {}: host preparation re-applied",
            k.old, k.new
        )),
        "{}",
        stderr(&o)
    );
    let all = agent(r, &["check"]);
    assert_eq!(all.status.code(), Some(0), "{}", stdout(&all));
}

/// The V100 node needs a reboot for the netns mode, but the newer installed
/// kernel lacks its DKMS install: the kured sentinel is held back until it has it.
#[test]
fn dkms_gap_holds_back_the_reboot_sentinel() {
    let Some(k) = kernels() else { return };
    let t = node("v100");
    let r = t.path();
    write(r, "/proc/sys/kernel/osrelease", &format!("{}\n", k.old));
    write(
        r,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nenabled = false\n[systemd]\nenabled = false\n\
         [rdma]\nnetns_mode = \"exclusive\"\nreboot_sentinel = true\n\
         [kernel]\nrequired_modules = []\n",
    );
    k.install(r, &k.old);
    k.install(r, &k.new);
    k.dkms(r, "older-only");
    let o = agent(r, &["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !r.join("var/run/reboot-required").exists(),
        "sentinel raised although the next kernel would lose rdma-probe"
    );
    std::fs::remove_dir_all(r.join("var/lib/dkms")).unwrap();
    std::fs::remove_dir_all(r.join(format!("lib/modules/{}/updates", k.old))).unwrap();
    k.dkms(r, "installed");
    let o = agent(r, &["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        read(r, "/var/run/reboot-required").contains("RDMA netns mode exclusive"),
        "sentinel once the install exists"
    );
}

/// What Debian's dkms 3.0.10 printed in the VM tier (tests/fixtures/dkms/vm,
/// saved by tests/vm/save-fixtures.sh) on bookworm's kernel next to
/// bookworm-backports' (a `+deb12` release): every line is understood, the
/// states are the ones the guest put the builds in, and the backports release
/// sorts after bookworm's, as the reboot gate needs it to.
#[test]
fn real_dkms_status_across_the_vm_reboot_into_a_backports_kernel() {
    use rdma_node_agent::concerns::kernel::compare_releases;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dkms/vm");
    let text = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let (a, b) = (text("booted-kernel"), text("newer-kernel"));
    let (a, b) = (a.trim(), b.trim());
    assert!(b.contains("+deb12"), "{b}");
    assert_eq!(compare_releases(b, a), std::cmp::Ordering::Greater);
    for (file, want_a, want_b) in [
        (
            "status-newer-built.txt",
            DkmsState::Installed,
            DkmsState::Built,
        ),
        (
            "status-newer-installed.txt",
            DkmsState::Installed,
            DkmsState::Installed,
        ),
        (
            "status-after-reboot.txt",
            DkmsState::Installed,
            DkmsState::Installed,
        ),
    ] {
        let lines = parse_dkms_status(&text(file));
        let states: Vec<(&str, &str, Option<&str>, &DkmsState)> = lines
            .iter()
            .map(|l| {
                (
                    l.module.as_str(),
                    l.version.as_str(),
                    l.kernel.as_deref(),
                    &l.state,
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("rdma-probe", "1.0", Some(a), &want_a),
                ("rdma-probe", "1.0", Some(b), &want_b)
            ],
            "{file}"
        );
        assert!(
            lines.iter().all(|l| l.notes.is_empty()),
            "{file}: {lines:?}"
        );
    }
}
