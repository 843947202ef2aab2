//! A port's typed values, parsed as the kernel prints them
//! (drivers/infiniband/core/sysfs.c: `state_show`, `phys_state_show`,
//! `rate_show`, `link_layer_show`). For `state` and `phys_state` the number
//! before the colon is the kernel's ABI: a known number beside a name the
//! kernel would not print is read by the number, and the odd text is noted.
//! A value without a number is an error on that field, which is then
//! unknown: never read as "down".

use serde::{Serialize, Serializer};

use super::Port;

/// `ports/<n>/state`: `"%d: %s"` with the names of `state_show` in sysfs.c
/// (enum ib_port_state), or `UNKNOWN` past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortState(pub u32);

impl PortState {
    pub const NAMES: [&'static str; 6] = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];
    pub const ACTIVE: PortState = PortState(4);

    /// The kernel's spelling of this value.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .get(self.0 as usize)
            .copied()
            .unwrap_or("UNKNOWN")
    }

    pub fn is_named(self) -> bool {
        (self.0 as usize) < Self::NAMES.len()
    }

    pub fn is_active(self) -> bool {
        self == Self::ACTIVE
    }
}

/// `ports/<n>/phys_state`: `"%u: %s"` with the names of `phys_state_to_str`
/// in sysfs.c (enum ib_port_phys_state), `<unknown>` for 0 and past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysState(pub u32);

impl PhysState {
    pub const NAMES: [&'static str; 8] = [
        "<unknown>",
        "Sleep",
        "Polling",
        "Disabled",
        "PortConfigurationTraining",
        "LinkUp",
        "LinkErrorRecovery",
        "Phy Test",
    ];

    pub fn name(self) -> &'static str {
        Self::NAMES
            .get(self.0 as usize)
            .copied()
            .unwrap_or("<unknown>")
    }
}

/// `ports/<n>/link_layer`: `InfiniBand`, `Ethernet`, or `Unknown` (and an
/// empty file from some drivers): labelled `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Unknown,
}

impl LinkLayer {
    /// As `[rdma.min_active_ports]` keys and the metrics' `link_layer` label name it.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unknown => "unknown",
        }
    }
}

macro_rules! serialize_as {
    ($t:ty, $f:expr) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($f(*self))
            }
        }
    };
}
serialize_as!(PortState, PortState::name);
serialize_as!(PhysState, PhysState::name);
serialize_as!(LinkLayer, LinkLayer::as_str);

/// The number of `"<number>: <name>"`.
fn number(text: &str) -> Result<u32, String> {
    let t = text.trim_end_matches('\n');
    let bad = || format!("cannot parse {t:?} (expected like \"4: ACTIVE\")");
    let (num, _) = t.split_once(':').ok_or_else(bad)?;
    num.trim().parse().map_err(|_| bad())
}

/// A note when `text` is not exactly what the kernel prints for `id`.
fn odd_name(text: &str, id: u32, name_of: impl Fn(u32) -> &'static str) -> Option<String> {
    let t = text.trim_end_matches('\n');
    let printed = format!("{id}: {}", name_of(id));
    (t != printed).then(|| format!("{t:?} read as {id} (the kernel prints \"{printed}\")"))
}

/// `4: ACTIVE`, `1: DOWN`, `7: UNKNOWN` (a value past the kernel's names).
pub fn parse_state(text: &str) -> Result<PortState, String> {
    number(text).map(PortState)
}

/// `5: LinkUp`, `7: Phy Test`, `6: LinkErrorRecovery`, `9: <unknown>`.
pub fn parse_phys_state(text: &str) -> Result<PhysState, String> {
    number(text).map(PhysState)
}

/// A note when a state's text is not the kernel's spelling for its number.
pub fn state_note(text: &str) -> Option<String> {
    let id = number(text).ok()?;
    odd_name(text, id, |i| PortState(i).name())
}

/// A note when a phys_state's text is not the kernel's spelling for its number.
pub fn phys_state_note(text: &str) -> Option<String> {
    let id = number(text).ok()?;
    odd_name(text, id, |i| PhysState(i).name())
}

/// `200 Gb/sec (4X HDR)` → 200; `2.5 Gb/sec (1X SDR)` → 2.5; before 5.x SDR
/// printed no speed: `10 Gb/sec (4X)`.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    t.strip_suffix(')')
        .and_then(|r| r.split_once(" Gb/sec ("))
        .or_else(|| t.split_once(" Gb/sec").filter(|(_, rest)| rest.is_empty()))
        .and_then(|(n, _)| n.trim().parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r >= 0.0)
        .ok_or_else(|| format!("cannot parse {t:?} (expected like \"200 Gb/sec (4X HDR)\")"))
}

/// `InfiniBand`, `Ethernet`, `Unknown`; an empty file is unknown too.
pub fn parse_link_layer(text: &str) -> Result<LinkLayer, String> {
    match text.trim() {
        "InfiniBand" => Ok(LinkLayer::InfiniBand),
        "Ethernet" => Ok(LinkLayer::Ethernet),
        "Unknown" | "" => Ok(LinkLayer::Unknown),
        t => Err(format!(
            "cannot parse {t:?} (the kernel prints InfiniBand, Ethernet or Unknown)"
        )),
    }
}

impl Port {
    /// `state` by the kernel's number; `None` when unreadable, absent or not
    /// a number (unknown, never "down").
    pub fn state_value(&self) -> Option<PortState> {
        let text = self.state.as_ref().ok()?.as_deref()?;
        parse_state(text).ok()
    }

    /// `link_layer` typed; `None` when unreadable, absent or odd text.
    pub fn link_layer_value(&self) -> Option<LinkLayer> {
        let text = self.link_layer.as_ref().ok()?.as_deref()?;
        parse_link_layer(text).ok()
    }

    /// `rate` in Gb/s; `None` when unreadable, absent or not the kernel's form.
    pub fn rate_gbps(&self) -> Option<f64> {
        let text = self.rate.as_ref().ok()?.as_deref()?;
        parse_rate(text).ok()
    }

    /// The lane count in `rate`'s parenthesis (`4X HDR` → 4); `None` when
    /// unreadable or absent (a kernel before 5.x printed none for some rates).
    pub fn width(&self) -> Option<u32> {
        let text = self.rate.as_ref().ok()?.as_deref()?;
        parse_width(text)
    }
}

/// `200 Gb/sec (4X HDR)` → 4; `100 Gb/sec` → none.
pub fn parse_width(text: &str) -> Option<u32> {
    let (_, rest) = text.split_once('(')?;
    let w = rest.split_whitespace().next()?.trim_end_matches(')');
    w.strip_suffix('X')?.parse().ok()
}
