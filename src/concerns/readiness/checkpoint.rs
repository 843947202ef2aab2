//! The kubelet's device-plugin checkpoint,
//! `/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`, as the
//! kubelet writes it (kubernetes `pkg/kubelet/cm/devicemanager/checkpoint`):
//!
//! ```text
//! {"Data":{"PodDeviceEntries":[{"PodUID":…,"ContainerName":…,"ResourceName":…,
//!          "DeviceIDs":{"<numa node>":[…]},"AllocResp":"<base64 protobuf>"}],
//!          "RegisteredDevices":{"<resource>":["<device id>",…]}},
//!  "Checksum":<u32>,"BootID":"…"}
//! ```
//!
//! `RegisteredDevices` holds the *healthy* devices of each registered resource.
//! Kubernetes ≤ 1.19 wrote `DeviceIDs` as a plain list (format v1).
//!
//! The checksum is FNV-32a over go-spew's `%#v` rendering of `Data` (the
//! kubelet's `checksum.New` → `hashutil.DeepHashObject`, spew with SortKeys and
//! DisableMethods): rendered here byte for byte, and checked against
//! checkpoints written by real kubelets (see the tests), so a mismatch means the
//! file is corrupt or in a layout this agent does not know.

use std::collections::BTreeMap;
use std::fmt::Write;

use base64::Engine;
use serde::Deserialize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("not a kubelet device-plugin checkpoint: {0}")]
    Json(String),
    #[error("AllocResp of pod {pod} is not base64: {message}")]
    AllocResp { pod: String, message: String },
}

/// Go's JSON decoding leaves absent fields at their zero value: `null` and a
/// missing key are both a nil slice or map (rendered `<nil>`), `[]` an empty one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Checkpoint {
    #[serde(rename = "Data")]
    pub data: Data,
    #[serde(rename = "Checksum", default)]
    pub checksum: u64,
    /// Newer kubelets record the boot it was written in (outside the checksum).
    #[serde(rename = "BootID", default)]
    pub boot_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Data {
    #[serde(rename = "PodDeviceEntries", default)]
    pub entries: Option<Vec<Entry>>,
    #[serde(rename = "RegisteredDevices", default)]
    pub registered: Option<BTreeMap<String, Option<Vec<String>>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Entry {
    #[serde(rename = "PodUID", default)]
    pub pod_uid: String,
    #[serde(rename = "ContainerName", default)]
    pub container: String,
    #[serde(rename = "ResourceName", default)]
    pub resource: String,
    #[serde(rename = "DeviceIDs", default)]
    pub device_ids: DeviceIds,
    /// The device plugin's Allocate answer, base64 in the file.
    #[serde(rename = "AllocResp", default)]
    pub alloc_resp: Option<String>,
}

/// Device IDs per NUMA node (`DevicesPerNUMA`), or a plain list (format v1).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum DeviceIds {
    PerNuma(BTreeMap<String, Option<Vec<String>>>),
    List(Vec<String>),
    Nil(()),
}

impl Default for DeviceIds {
    fn default() -> Self {
        DeviceIds::Nil(())
    }
}

impl DeviceIds {
    pub fn all(&self) -> Vec<&str> {
        match self {
            DeviceIds::PerNuma(m) => m.values().flatten().flatten().map(String::as_str).collect(),
            DeviceIds::List(v) => v.iter().map(String::as_str).collect(),
            DeviceIds::Nil(()) => Vec::new(),
        }
    }
}

impl Checkpoint {
    pub fn parse(text: &str) -> Result<Checkpoint, CheckpointError> {
        serde_json::from_str(text).map_err(|e| CheckpointError::Json(e.to_string()))
    }

    /// Healthy devices per registered resource.
    pub fn registered(&self) -> BTreeMap<&str, usize> {
        self.data
            .registered
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_ref().map_or(0, Vec::len)))
            .collect()
    }

    /// The checksum the kubelet would compute for this data.
    pub fn computed_checksum(&self) -> Result<u64, CheckpointError> {
        Ok(u64::from(fnv32a(self.data.spew()?.as_bytes())))
    }

    pub fn checksum_ok(&self) -> Result<bool, CheckpointError> {
        Ok(self.computed_checksum()? == self.checksum)
    }
}

/// FNV-1a, 32 bit (Go's `hash/fnv.New32a`).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// A `[]string` as spew prints it inside a container: `[a b]`, nil `<nil>`.
fn strings(out: &mut String, v: Option<&Vec<String>>) {
    match v {
        None => out.push_str("<nil>"),
        Some(v) => {
            out.push('[');
            out.push_str(&v.join(" "));
            out.push(']');
        }
    }
}

impl Data {
    /// go-spew's `%#v` of `checkpoint.checkpointData`: struct fields carry
    /// `(type)` prefixes, elements of slices and maps do not; map keys sorted
    /// (NUMA ids as integers); strings raw; `[]byte` as decimal bytes.
    pub fn spew(&self) -> Result<String, CheckpointError> {
        let mut out = String::from(
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)",
        );
        match &self.entries {
            None => out.push_str("<nil>"),
            Some(entries) => {
                out.push('[');
                for (i, e) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    e.spew(&mut out)?;
                }
                out.push(']');
            }
        }
        out.push_str(" RegisteredDevices:(map[string][]string)");
        match &self.registered {
            None => out.push_str("<nil>"),
            Some(m) => {
                out.push_str("map[");
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    strings(&mut out, v.as_ref());
                }
                out.push(']');
            }
        }
        out.push('}');
        Ok(out)
    }
}

impl Entry {
    fn spew(&self, out: &mut String) -> Result<(), CheckpointError> {
        let _ = write!(
            out,
            "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} DeviceIDs:",
            self.pod_uid, self.container, self.resource
        );
        match &self.device_ids {
            DeviceIds::PerNuma(m) => {
                out.push_str("(checkpoint.DevicesPerNUMA)map[");
                let mut numa: Vec<(i64, &Option<Vec<String>>)> = Vec::new();
                for (k, v) in m {
                    let n = k.parse().map_err(|_| {
                        CheckpointError::Json(format!("NUMA node {k:?} is not an integer"))
                    })?;
                    numa.push((n, v));
                }
                numa.sort_by_key(|(n, _)| *n);
                for (i, (n, v)) in numa.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let _ = write!(out, "{n}:");
                    strings(out, v.as_ref());
                }
                out.push(']');
            }
            // v1 wrote a plain list; its checksum renders it under the v2 type names.
            DeviceIds::List(v) => {
                out.push_str("([]string)");
                strings(out, Some(v));
            }
            DeviceIds::Nil(()) => out.push_str("(checkpoint.DevicesPerNUMA)<nil>"),
        }
        out.push_str(" AllocResp:([]uint8)");
        match &self.alloc_resp {
            None => out.push_str("<nil>"),
            Some(b64) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| CheckpointError::AllocResp {
                        pod: self.pod_uid.clone(),
                        message: e.to_string(),
                    })?;
                out.push('[');
                for (i, b) in bytes.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let _ = write!(out, "{b}");
                }
                out.push(']');
            }
        }
        out.push('}');
        Ok(())
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
