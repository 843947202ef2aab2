//! rdma.netns: whether ib_core loads from the running kernel's initramfs, and
//! whether the image holds the agent's modprobe.d file. Listing an image takes
//! seconds (`lsinitramfs` unpacks it), and every managed gather needs the answer:
//! each daemon cycle and each node-problem-detector `check --only rdma.netns`.
//! So the answer is kept in the agent's state, keyed by the image's stamp, and
//! the image is listed again only when it changed (a rebuild writes a new one).

use serde::{Deserialize, Serialize};

use super::*;
use crate::host::state::FileStamp;

/// One answer per host: the running kernel's image.
const CACHE_FILE: &str = "initramfs.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Listed {
    tool: String,
    image: String,
    stamp: FileStamp,
    agent_file: PathBuf,
    has_ib_core: bool,
    has_agent_file: bool,
}

/// Lists the initramfs of the running kernel with the tool of the distribution
/// whose image is there (initramfs-tools or dracut). `Err`: the tool failed, so
/// whether ib_core loads from it is unknown. `Ok(None)`: not the live host (a
/// tree's tools cannot be trusted to match it), no image or no tool.
pub(super) fn initramfs(
    host: &ReadHost,
    release: &str,
    agent_file: &Path,
) -> Result<Option<Initramfs>, String> {
    if !host.is_live() {
        return Ok(None);
    }
    listed(host, release, agent_file, &|tool, image| {
        host.query(tool, &[image])
    })
}

type Run<'a> = dyn Fn(&str, &str) -> Option<std::io::Result<std::process::Output>> + 'a;

fn listed(
    host: &ReadHost,
    release: &str,
    agent_file: &Path,
    run: &Run,
) -> Result<Option<Initramfs>, String> {
    let kinds: [(&str, String, Vec<String>); 2] = [
        (
            "lsinitramfs",
            format!("/boot/initrd.img-{release}"),
            vec![
                "update-initramfs".into(),
                "-u".into(),
                "-k".into(),
                release.into(),
            ],
        ),
        (
            "lsinitrd",
            format!("/boot/initramfs-{release}.img"),
            vec![
                "dracut".into(),
                "-f".into(),
                "--kver".into(),
                release.into(),
            ],
        ),
    ];
    for (tool, image, rebuild) in kinds {
        if !host.exists(Path::new(&image)) {
            continue;
        }
        let found = |has_ib_core, has_agent_file| {
            Ok(Some(Initramfs {
                has_ib_core,
                has_agent_file,
                rebuild: rebuild.clone(),
            }))
        };
        let stamp = host.stamp(Path::new(&image));
        if let Some(hit) = cached(host, tool, &image, stamp.as_ref(), agent_file) {
            return found(hit.has_ib_core, hit.has_agent_file);
        }
        let out = match run(tool, &image) {
            None => continue,
            Some(Ok(out)) => out,
            Some(Err(e)) => return Err(format!("`{tool} {image}`: {e}")),
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "`{tool} {image}` failed: {}",
                stderr.lines().next().unwrap_or("no output").trim()
            ));
        }
        let (has_ib_core, has_agent_file) =
            initramfs_contents(&String::from_utf8_lossy(&out.stdout), agent_file);
        // Kept only when the image did not change while it was listed.
        if let Some(stamp) = stamp.filter(|s| host.stamp(Path::new(&image)).as_ref() == Some(s)) {
            let listed = Listed {
                tool: tool.into(),
                image: image.clone(),
                stamp,
                agent_file: agent_file.to_owned(),
                has_ib_core,
                has_agent_file,
            };
            // A cache: a state directory that cannot be written only costs the next listing.
            if let Ok(bytes) = serde_json::to_vec_pretty(&listed) {
                if let Err(e) = host.cache_put(CACHE_FILE, &bytes) {
                    tracing::debug!("initramfs listing not cached: {e}");
                }
            }
        }
        return found(has_ib_core, has_agent_file);
    }
    Ok(None)
}

/// The cached answer for this image, tool and agent file, if the image is the one listed.
fn cached(
    host: &ReadHost,
    tool: &str,
    image: &str,
    stamp: Option<&FileStamp>,
    agent_file: &Path,
) -> Option<Listed> {
    let stamp = stamp?;
    let bytes = host.cache_get(CACHE_FILE).ok().flatten()?;
    let listed: Listed = serde_json::from_slice(&bytes).ok()?;
    (listed.tool == tool
        && listed.image == image
        && &listed.stamp == stamp
        && listed.agent_file == agent_file)
        .then_some(listed)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Output};

    use super::*;

    const RELEASE: &str = "6.1.0-41-amd64";
    const AGENT: &str = "/etc/modprobe.d/rdma-node-agent.conf";

    /// A node tree with an initramfs image, and a listing tool that counts its runs.
    fn node() -> (tempfile::TempDir, ReadHost, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("boot")).unwrap();
        let image = dir.path().join(format!("boot/initrd.img-{RELEASE}"));
        std::fs::write(&image, "one").unwrap();
        let host = crate::host::Host::new(dir.path()).reader();
        (dir, host, image)
    }

    fn tool<'a>(
        runs: &'a Cell<usize>,
        status: i32,
        listing: &'a str,
    ) -> impl Fn(&str, &str) -> Option<std::io::Result<Output>> + 'a {
        move |tool, image| {
            assert_eq!(
                (tool, image),
                (
                    "lsinitramfs",
                    format!("/boot/initrd.img-{RELEASE}").as_str()
                )
            );
            runs.set(runs.get() + 1);
            Some(Ok(Output {
                status: ExitStatus::from_raw(status << 8),
                stdout: listing.as_bytes().to_vec(),
                stderr: b"lsinitramfs: bad magic\n".to_vec(),
            }))
        }
    }

    const LISTING: &str =
        "usr/lib/modules/6.1.0-41-amd64/kernel/drivers/infiniband/core/ib_core.ko.xz\n";

    #[test]
    fn an_image_is_listed_again_only_when_it_changed() {
        let (_dir, host, image) = node();
        let runs = Cell::new(0);
        let run = tool(&runs, 0, LISTING);
        let agent = Path::new(AGENT);
        let first = listed(&host, RELEASE, agent, &run).unwrap().unwrap();
        assert!(first.has_ib_core && !first.has_agent_file);
        assert_eq!(first.rebuild, ["update-initramfs", "-u", "-k", RELEASE]);
        assert_eq!(listed(&host, RELEASE, agent, &run).unwrap().unwrap(), first);
        assert_eq!(runs.get(), 1, "an unchanged image is listed once");
        // Another agent file is another question.
        listed(
            &host,
            RELEASE,
            Path::new("/etc/modprobe.d/other.conf"),
            &run,
        )
        .unwrap();
        assert_eq!(runs.get(), 2);
        listed(&host, RELEASE, agent, &run).unwrap();
        assert_eq!(runs.get(), 3);
        // update-initramfs writes a new image and renames it over the old one.
        let new = image.with_extension("new");
        std::fs::write(&new, "two").unwrap();
        std::fs::rename(&new, &image).unwrap();
        let with_file = format!("{LISTING}etc/modprobe.d/rdma-node-agent.conf\n");
        let rebuilt = tool(&runs, 0, &with_file);
        let after = listed(&host, RELEASE, agent, &rebuilt).unwrap().unwrap();
        assert!(after.has_agent_file, "the rewritten image is listed again");
        assert_eq!(runs.get(), 4);
        listed(&host, RELEASE, agent, &rebuilt).unwrap();
        assert_eq!(runs.get(), 4);
        // Written in place (same inode), as a hand edit would: listed again too.
        std::fs::write(&image, "three").unwrap();
        listed(&host, RELEASE, agent, &rebuilt).unwrap();
        assert_eq!(runs.get(), 5);
    }

    #[test]
    fn a_failed_listing_is_not_kept() {
        let (_dir, host, _image) = node();
        let runs = Cell::new(0);
        let fails = tool(&runs, 1, "");
        let agent = Path::new(AGENT);
        let e = listed(&host, RELEASE, agent, &fails).unwrap_err();
        assert_eq!(
            e,
            format!("`lsinitramfs /boot/initrd.img-{RELEASE}` failed: lsinitramfs: bad magic")
        );
        listed(&host, RELEASE, agent, &fails).unwrap_err();
        assert_eq!(runs.get(), 2, "a failure is asked again");
        assert!(host.cache_get(CACHE_FILE).unwrap().is_none());
    }

    #[test]
    fn a_cache_that_cannot_be_read_or_written_costs_only_a_listing() {
        let (dir, host, _image) = node();
        let state = dir.path().join("var/lib/rdma-node-agent");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join(CACHE_FILE), "{ not json").unwrap();
        let runs = Cell::new(0);
        let run = tool(&runs, 0, LISTING);
        let agent = Path::new(AGENT);
        assert!(
            listed(&host, RELEASE, agent, &run)
                .unwrap()
                .unwrap()
                .has_ib_core
        );
        assert_eq!(runs.get(), 1);
        // Replaced by a good answer.
        listed(&host, RELEASE, agent, &run).unwrap();
        assert_eq!(runs.get(), 1);
        // A planted link in the state directory is neither followed nor trusted.
        std::fs::remove_file(state.join(CACHE_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", state.join(CACHE_FILE)).unwrap();
        assert!(
            listed(&host, RELEASE, agent, &run)
                .unwrap()
                .unwrap()
                .has_ib_core
        );
        assert_eq!(runs.get(), 2);
    }

    #[test]
    fn a_tree_is_never_listed() {
        let (_dir, host, _image) = node();
        assert!(!host.is_live());
        assert_eq!(initramfs(&host, RELEASE, Path::new(AGENT)), Ok(None));
    }
}
