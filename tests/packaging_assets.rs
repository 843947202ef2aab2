//! The man page and shell completions the packages ship are committed under
//! packaging/generated/ so that a plain `cargo deb` or `cargo generate-rpm` after
//! `cargo build --release` finds them. They must be exactly what this CLI
//! generates now: a changed option or version without a regeneration fails here.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn shipped_man_page_and_completions_are_fresh() {
    let fresh = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("generate-assets")
        .arg(fresh.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/generated");
    let (want, got) = (files(fresh.path()), files(&shipped));
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    let stale: Vec<&String> = want
        .iter()
        .filter(|(name, bytes)| got.get(*name) != Some(bytes))
        .map(|(name, _)| name)
        .collect();
    assert!(
        names(&want) == names(&got) && stale.is_empty(),
        "packaging/generated/ is stale (differs: {stale:?}; generated {:?}, shipped {:?}): \
         run `cargo run -- generate-assets packaging/generated` and commit the result",
        names(&want),
        names(&got)
    );
}
