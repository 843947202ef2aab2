//! Resource limits as the kernel, systemd and OCI specs spell them.

use std::fmt;

use serde::{Deserialize, Deserializer};

/// A resource limit: a byte count, a size with a binary unit, or unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Limit(pub u64);

impl Limit {
    /// RLIM_INFINITY, as the kernel and OCI JSON spell it.
    pub const UNLIMITED: Limit = Limit(u64::MAX);

    pub fn is_unlimited(self) -> bool {
        self == Limit::UNLIMITED
    }

    /// Parses `unlimited`/`infinity`, `4MiB`, `4M`, `64K`, `1GiB` or a plain byte count.
    /// Units are powers of 1024 as in systemd; decimal units are refused, not guessed.
    pub fn parse(s: &str) -> Result<Limit, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinity") {
            return Ok(Limit::UNLIMITED);
        }
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: u64 = num.parse().map_err(|_| {
            format!("{s:?} is not a size: use a byte count, a size like \"4MiB\", or \"unlimited\"")
        })?;
        let shift = match unit.trim() {
            "" | "B" => 0,
            "K" | "KiB" => 10,
            "M" | "MiB" => 20,
            "G" | "GiB" => 30,
            "T" | "TiB" => 40,
            "KB" | "MB" | "GB" | "TB" | "kB" => {
                return Err(format!(
                    "{s:?}: decimal units are ambiguous here; use KiB, MiB, GiB or TiB (powers of 1024)"
                ));
            }
            other => {
                return Err(format!(
                    "{s:?}: unknown unit {other:?}; use KiB, MiB, GiB or TiB"
                ));
            }
        };
        n.checked_mul(1u64 << shift)
            .filter(|v| *v != u64::MAX)
            .map(Limit)
            .ok_or_else(|| format!("{s:?} is too large; use \"unlimited\""))
    }

    /// The spelling systemd's `LimitMEMLOCK=` accepts.
    pub fn systemd_value(self) -> String {
        if self.is_unlimited() {
            "infinity".into()
        } else {
            self.0.to_string()
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unlimited() {
            return f.write_str("unlimited");
        }
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 >= 1 << shift && self.0 % (1 << shift) == 0 {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{} bytes", self.0)
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Limit(n)),
            Raw::Str(s) => Limit::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}
