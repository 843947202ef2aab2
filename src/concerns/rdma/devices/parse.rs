//! The sysfs texts, parsed as the kernel prints them
//! (drivers/infiniband/core/sysfs.c: `state_show`, `phys_state_show`,
//! `rate_show`, `link_layer_show`). For `state` and `phys_state` the number
//! before the colon is the kernel's ABI: a known number beside a name the
//! kernel would not print is read by the number, and the odd text is noted.
//! A value without a number is an error on that field, which is then
//! unknown: never read as "down".

use super::{Device, Kind, Port, Problem, RawDevice, RawPort, Read};
use crate::host::inventory::port::{
    parse_link_layer, parse_phys_state, parse_rate, parse_state, phys_state_note, state_note,
};

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
    p: RawPort,
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
        netdev: p.ndev,
    }
}

pub fn parse(raw: RawDevice) -> Device {
    let mut errors = raw.errors;
    let mut notes = Vec::new();
    let n = &raw.name;
    let text = |errors: &mut Vec<String>, what: &str, read: &Read| {
        field(errors, &format!("{n} {what}"), read, parse_text, false).flatten()
    };
    let node_guid = field(
        &mut errors,
        &format!("{n} node_guid"),
        &raw.node_guid,
        parse_guid,
        false,
    );
    let fw_ver = text(&mut errors, "fw_ver", &raw.fw_ver);
    let hca_type = text(&mut errors, "hca_type", &raw.hca_type);
    let board_id = text(&mut errors, "board_id", &raw.board_id);
    let mut ports = Vec::new();
    for p in raw.ports {
        let Ok(number) = p.name.parse::<u32>() else {
            errors.push(format!("{n}: unexpected port directory {:?}", p.name));
            continue;
        };
        ports.push(parse_port(
            &format!("{n}/{number}"),
            number,
            p,
            &mut errors,
            &mut notes,
        ));
    }
    ports.sort_by_key(|p| p.port);
    let problem = match &raw.broken_link {
        Some(to) => Some(Problem::BrokenLink(format!(
            "/sys/class/infiniband/{n} points to {}, which does not exist",
            to.display()
        ))),
        // An unreadable ports/ directory is an error above, not "no ports".
        None if ports.is_empty() && errors.is_empty() => Some(Problem::NoPorts),
        None => None,
    };
    let kind = if raw.name.starts_with("mlx5_bond_") {
        Kind::Bond
    } else if raw.is_vf {
        Kind::Vf
    } else if raw.is_software {
        Kind::Software
    } else {
        Kind::Pf
    };
    Device {
        name: raw.name,
        kind,
        pci: raw.pci,
        node_guid,
        fw_ver,
        hca_type,
        board_id,
        netdevs: raw.netdevs,
        ports,
        problem,
        errors,
        notes,
    }
}
