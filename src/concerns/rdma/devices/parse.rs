//! The sysfs texts, parsed as the kernel prints them
//! (drivers/infiniband/core/sysfs.c: `state_show`, `phys_state_show`,
//! `rate_show`, `link_layer_show`). For `state` and `phys_state` the number
//! before the colon is the kernel's ABI: a known number beside a name the
//! kernel would not print is read by the number, and the odd text is noted.
//! A value without a number is an error on that field, which is then
//! unknown: never read as "down".

use super::{Device, Kind, Port, Problem};
use crate::host::inventory::port::{
    parse_link_layer, parse_phys_state, parse_rate, parse_state, phys_state_note, state_note,
};
use crate::host::inventory::{self, Read};

/// `0c42:a103:0065:6a3c`.
pub fn parse_guid(text: &str) -> Result<String, String> {
    let t = text.trim();
    let groups: Vec<&str> = t.split(':').collect();
    if groups.len() == 4
        && groups
            .iter()
            .all(|g| g.len() == 4 && g.chars().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(t.to_owned())
    } else {
        Err(format!(
            "cannot parse {t:?} (expected like \"0c42:a103:0065:6a3c\")"
        ))
    }
}

/// Free text (firmware version, HCA type, board id): one printable line, or
/// nothing (`None`): drivers without a firmware string print an empty line.
pub fn parse_text(text: &str) -> Result<Option<String>, String> {
    let t = text.trim();
    if t.chars().any(char::is_control) {
        Err(format!("unexpected content {t:?}"))
    } else {
        Ok(Some(t.to_owned()).filter(|t| !t.is_empty()))
    }
}

/// A field's value; a read or parse problem goes to `errors`. `required`: a
/// missing file is an error too (a port without `state` cannot be judged).
fn field<T>(
    errors: &mut Vec<String>,
    what: &str,
    read: &Read,
    parse: impl Fn(&str) -> Result<T, String>,
    required: bool,
) -> Option<T> {
    match read {
        Ok(Some(t)) => parse(t)
            .map_err(|e| errors.push(format!("{what}: {e}")))
            .ok(),
        Ok(None) if required => {
            errors.push(format!("{what}: missing"));
            None
        }
        Ok(None) => None,
        Err(e) => {
            errors.push(format!("{what}: {e}"));
            None
        }
    }
}

/// One port's fields (`at`: `device/port`), its read errors and the notes
/// its state and physical state call for.
fn parse_port(
    at: &str,
    number: u32,
    p: &inventory::Port,
    errors: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Port {
    for (what, read, note) in [
        ("state", &p.state, state_note as fn(&str) -> Option<String>),
        ("phys_state", &p.phys_state, phys_state_note),
    ] {
        if let Ok(Some(t)) = read {
            notes.extend(note(t).map(|n| format!("{at} {what}: {n}")));
        }
    }
    let e = errors;
    Port {
        port: number,
        state: field(e, &format!("{at} state"), &p.state, parse_state, true),
        phys_state: field(
            e,
            &format!("{at} phys_state"),
            &p.phys_state,
            parse_phys_state,
            true,
        ),
        rate_gbps: field(e, &format!("{at} rate"), &p.rate, parse_rate, true),
        link_layer: field(
            e,
            &format!("{at} link_layer"),
            &p.link_layer,
            parse_link_layer,
            true,
        ),
        netdev: p.netdev(),
    }
}

/// What a device is, by its name and where its class link leads.
fn kind(d: &inventory::Device) -> Kind {
    if d.name.starts_with("mlx5_bond_") {
        Kind::Bond
    // Only a PCI function's VF-ness is the device's.
    } else if d.pci.is_some() && d.physfn {
        Kind::Vf
    } else if d.is_software {
        Kind::Software
    } else {
        Kind::Pf
    }
}

/// A device of that name and kind with nothing read yet.
fn unread(name: &str, kind: Kind) -> Device {
    Device {
        name: name.to_owned(),
        kind,
        pci: None,
        node_guid: None,
        fw_ver: None,
        hca_type: None,
        board_id: None,
        netdevs: Vec::new(),
        ports: Vec::new(),
        problem: None,
        errors: Vec::new(),
        notes: Vec::new(),
    }
}

/// One device of the inventory, typed; what could not be read or parsed
/// goes to its `errors`.
pub fn parse(d: &inventory::Device) -> Device {
    let n = &d.name;
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let mut device = unread(n, kind(d));
    if let Some(to) = &d.broken_link {
        device.problem = Some(Problem::BrokenLink(format!(
            "/sys/class/infiniband/{n} points to {}, which does not exist",
            to.display()
        )));
        return device;
    }
    if let Some(e) = &d.open_error {
        device.errors.push(format!("{n}: {e}"));
        return device;
    }
    // A PCI function's netdevs are the device's; a software device names its own in `parent`.
    if d.pci.is_some() {
        device.pci = d.pci.clone();
        device.netdevs = d.function_netdevs.clone();
    }
    if d.is_software
        && let Some(p) = d.parent_text()
    {
        device.netdevs = p.split_whitespace().map(str::to_owned).collect();
    }
    if let Some(e) = &d.ports_error {
        errors.push(format!("{n}: {e}"));
    }
    let text = |errors: &mut Vec<String>, what: &str, read: &Read| {
        field(errors, &format!("{n} {what}"), read, parse_text, false).flatten()
    };
    device.node_guid = field(
        &mut errors,
        &format!("{n} node_guid"),
        &d.node_guid,
        parse_guid,
        false,
    );
    device.fw_ver = text(&mut errors, "fw_ver", &d.fw_ver);
    device.hca_type = text(&mut errors, "hca_type", &d.hca_type);
    device.board_id = text(&mut errors, "board_id", &d.board_id);
    for p in &d.ports {
        let Ok(number) = p.name.parse::<u32>() else {
            errors.push(format!("{n}: unexpected port directory {:?}", p.name));
            continue;
        };
        let at = format!("{n}/{number}");
        device
            .ports
            .push(parse_port(&at, number, p, &mut errors, &mut notes));
    }
    device.ports.sort_by_key(|p| p.port);
    // An unreadable ports/ directory is an error above, not "no ports".
    if device.ports.is_empty() && errors.is_empty() {
        device.problem = Some(Problem::NoPorts);
    }
    device.errors = errors;
    device.notes = notes;
    device
}
