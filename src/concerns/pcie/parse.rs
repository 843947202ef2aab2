//! The kernel's AER statistics files and link attributes, parsed. Pure.
//!
//! `aer_dev_correctable`, `aer_dev_nonfatal` and `aer_dev_fatal` (drivers/pci/pcie/aer.c,
//! `aer_stats_dev_attr`; Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats):
//! one line `<name> <count>` for each error bit the kernel names (`RxErr`, `BadTLP`,
//! `CmpltTO`, `UnsupReq`, …), `<array>_bit[<n>] <count>` for a bit it does not name
//! (only when non-zero), then `TOTAL_ERR_COR`, `TOTAL_ERR_NONFATAL` or
//! `TOTAL_ERR_FATAL` with the sum. Root ports (and RCECs) also have
//! `aer_rootport_total_err_{cor,nonfatal,fatal}`: one number each, the error
//! messages the root port received from below it. All count since boot.

use std::collections::BTreeMap;

use serde::Serialize;

/// The three severities, as the metrics' `severity` label spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Correctable,
    Nonfatal,
    Fatal,
}

impl Severity {
    pub const ALL: [Severity; 3] = [Severity::Correctable, Severity::Nonfatal, Severity::Fatal];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Correctable => "correctable",
            Severity::Nonfatal => "nonfatal",
            Severity::Fatal => "fatal",
        }
    }

    /// The function's own statistics file.
    pub fn dev_file(self) -> &'static str {
        match self {
            Severity::Correctable => "aer_dev_correctable",
            Severity::Nonfatal => "aer_dev_nonfatal",
            Severity::Fatal => "aer_dev_fatal",
        }
    }

    /// The total's line in that file.
    pub fn total_key(self) -> &'static str {
        match self {
            Severity::Correctable => "TOTAL_ERR_COR",
            Severity::Nonfatal => "TOTAL_ERR_NONFATAL",
            Severity::Fatal => "TOTAL_ERR_FATAL",
        }
    }

    /// A root port's count of the messages it received.
    pub fn rootport_file(self) -> &'static str {
        match self {
            Severity::Correctable => "aer_rootport_total_err_cor",
            Severity::Nonfatal => "aer_rootport_total_err_nonfatal",
            Severity::Fatal => "aer_rootport_total_err_fatal",
        }
    }
}

/// One statistics file: the total and every non-zero error by the kernel's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub total: u64,
    pub errors: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("line {line} is not `<name> <count>`: {text:?}")]
    Line { line: usize, text: String },
    #[error("no {key} line")]
    NoTotal { key: &'static str },
}

/// One `aer_dev_*` file's text.
pub fn counts(text: &str, severity: Severity) -> Result<Counts, ParseError> {
    let mut out = Counts::default();
    let mut total = None;
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let bad = || ParseError::Line {
            line: i + 1,
            text: l.to_owned(),
        };
        let (name, n) = l.trim().rsplit_once(' ').ok_or_else(bad)?;
        let n: u64 = n.parse().map_err(|_| bad())?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad());
        }
        if name == severity.total_key() {
            total = Some(n);
        } else if n > 0 {
            out.errors.insert(name.to_owned(), n);
        }
    }
    out.total = total.ok_or(ParseError::NoTotal {
        key: severity.total_key(),
    })?;
    Ok(out)
}

/// A root port's `aer_rootport_total_err_*`: one number.
pub fn number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// `current_link_speed`/`max_link_speed` (`16.0 GT/s PCIe`, `8 GT/s`, `2.5 GT/s`)
/// in tenths of GT/s; `None` for `Unknown` (a link that is down) or anything else.
pub fn speed_tenths(text: &str) -> Option<u32> {
    let n = text.trim().strip_suffix(" PCIe").unwrap_or(text.trim());
    let n = n.strip_suffix("GT/s")?.trim();
    let (whole, frac) = n.split_once('.').unwrap_or((n, "0"));
    let whole: u32 = whole.parse().ok()?;
    let tenth: u32 = frac.get(..1)?.parse().ok()?;
    whole.checked_mul(10)?.checked_add(tenth)
}

/// `current_link_width`/`max_link_width`: lanes; `None` for 0 (no link) or text.
pub fn width(text: &str) -> Option<u32> {
    text.trim().parse().ok().filter(|w| *w > 0)
}

/// Tenths of GT/s as the kernel writes them (`16.0 GT/s`, `2.5 GT/s`).
pub fn show_speed(tenths: u32) -> String {
    format!("{}.{} GT/s", tenths / 10, tenths % 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/aer");

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
    }

    /// The kernel's format (fixtures from its source and a real machine; see PROVENANCE).
    #[test]
    fn the_kernels_files_parse() {
        let c = counts(&fixture("clean/aer_dev_correctable"), Severity::Correctable).unwrap();
        assert_eq!(c, Counts::default());
        let c = counts(&fixture("clean/aer_dev_fatal"), Severity::Fatal).unwrap();
        assert_eq!(c.total, 0);
        let c = counts(
            &fixture("errors/aer_dev_correctable"),
            Severity::Correctable,
        )
        .unwrap();
        assert_eq!(c.total, 8);
        assert_eq!(c.errors["RxErr"], 5);
        assert_eq!(c.errors["BadTLP"], 2);
        assert_eq!(c.errors["dev_cor_errs_bit[14]"], 1);
        let c = counts(&fixture("errors/aer_dev_nonfatal"), Severity::Nonfatal).unwrap();
        assert_eq!((c.total, c.errors["UnsupReq"]), (3, 3));
        // Another file's total is not this one's.
        assert_eq!(
            counts(&fixture("clean/aer_dev_fatal"), Severity::Nonfatal),
            Err(ParseError::NoTotal {
                key: "TOTAL_ERR_NONFATAL"
            })
        );
        assert!(matches!(
            counts("RxErr many\nTOTAL_ERR_COR 0\n", Severity::Correctable),
            Err(ParseError::Line { line: 1, .. })
        ));
        assert_eq!(number("17\n"), Some(17));
    }

    /// What Debian's 6.1 kernel wrote after the ACS VM tier's injections
    /// (tests/fixtures/aer/qemu-guest, copied from that run's results).
    #[test]
    fn the_guest_kernels_files_after_injection_parse() {
        let f = |n: &str, s| counts(&fixture(&format!("qemu-guest/{n}")), s).unwrap();
        let c = f("nic-aer_dev_correctable", Severity::Correctable);
        assert_eq!((c.total, c.errors["RxErr"]), (4, 4));
        let c = f("dsp2-aer_dev_nonfatal", Severity::Nonfatal);
        assert_eq!((c.total, c.errors["UnsupReq"]), (1, 1));
        let c = f("rp2-aer_dev_fatal", Severity::Fatal);
        assert_eq!((c.total, c.errors["DLP"]), (1, 1));
        assert_eq!(f("rp2-aer_dev_correctable", Severity::Correctable).total, 0);
    }

    #[test]
    fn link_attributes() {
        assert_eq!(speed_tenths("16.0 GT/s PCIe\n"), Some(160));
        assert_eq!(speed_tenths("8 GT/s\n"), Some(80));
        assert_eq!(speed_tenths("2.5 GT/s PCIe"), Some(25));
        assert_eq!(speed_tenths("Unknown\n"), None);
        assert_eq!(width("16\n"), Some(16));
        assert_eq!(width("0\n"), None);
        assert_eq!(show_speed(25), "2.5 GT/s");
    }
}
