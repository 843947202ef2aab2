//! Durations as Prometheus writes them (`10s`, `1h30m`, `500ms`), for `--timeout`
//! and `--flap-window`.

use std::time::Duration;

/// `1h30m`, `10s`, `500ms`, `2d`: a number and a unit, repeated (units y w d h m s ms,
/// as Prometheus' durations, a year 365 days). No bare number: `10` could mean anything.
pub fn parse(text: &str) -> Result<Duration, String> {
    let err =
        |why: &str| format!("invalid duration {text:?}: {why} (e.g. 10s, 500ms, 5m, 1h30m, 2d)");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(err("empty"));
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(err("expected a number"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| err("number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let ms: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            "" => return Err(err("a number without a unit")),
            _ => return Err(err(&format!("unknown unit {unit:?}"))),
        };
        let add = n
            .checked_mul(ms)
            .map(Duration::from_millis)
            .ok_or_else(|| err("too long"))?;
        total = total.checked_add(add).ok_or_else(|| err("too long"))?;
    }
    if total.is_zero() {
        return Err(err("must be longer than zero"));
    }
    Ok(total)
}

/// A range for PromQL, in whole seconds (at least one).
pub fn promql(d: Duration) -> String {
    format!("{}s", d.as_secs().max(1))
}

/// How a duration is shown to people: its largest fitting unit, as given.
pub fn show(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations_parse() {
        for (t, secs) in [
            ("10s", 10),
            ("1h", 3600),
            ("1h30m", 5400),
            ("2d", 172_800),
            ("1w", 604_800),
        ] {
            assert_eq!(parse(t).unwrap(), Duration::from_secs(secs), "{t}");
        }
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        for bad in [
            "",
            "10",
            "s",
            "1x",
            "0s",
            "-1s",
            "1.5h",
            "99999999999999999999s",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with("invalid duration"), "{bad}: {e}");
        }
        assert!(parse("10").unwrap_err().contains("without a unit"));
    }

    #[test]
    fn durations_are_written_back() {
        assert_eq!(promql(Duration::from_secs(3600)), "3600s");
        assert_eq!(promql(Duration::from_millis(10)), "1s");
        assert_eq!(show(Duration::from_secs(3600)), "1h");
        assert_eq!(show(Duration::from_secs(90)), "90s");
        assert_eq!(show(Duration::from_secs(300)), "5m");
    }
}
