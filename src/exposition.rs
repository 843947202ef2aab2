//! The two Prometheus exposition formats, written from one list of metric
//! families: the text format 0.0.4 (what Prometheus asks for first and what
//! `promtool check metrics` reads) and OpenMetrics 1.0.0 (when a scraper asks
//! for it). Only gauges and counters: all the agent exports.

use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// `text/plain; version=0.0.4` or `application/openmetrics-text; version=1.0.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// OpenMetrics only when the scraper asks for it in `Accept` at least as
    /// strongly as for text (Prometheus asks OpenMetrics first, text/plain as
    /// its fallback); everything else, no header included, gets text 0.0.4.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut om, mut text) = (0.0f32, 0.0f32);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.strip_prefix("q=").and_then(|q| q.parse::<f32>().ok()))
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

pub type Labels = Vec<(&'static str, String)>;

/// A flag as a sample value: 1 or 0.
pub fn bool01(b: bool) -> f64 {
    f64::from(u8::from(b))
}

#[derive(Debug, Clone)]
pub struct Family {
    /// Without `_total` for counters (both formats add it to the sample).
    pub name: String,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<(Labels, f64)>,
}

/// Metric families in the order they are written.
#[derive(Debug, Default)]
pub struct Families {
    prefix: &'static str,
    families: Vec<Family>,
}

impl Families {
    pub fn new(prefix: &'static str) -> Families {
        Families {
            prefix,
            families: Vec::new(),
        }
    }

    /// A family; add samples to what this returns. An empty family is written
    /// with its HELP and TYPE only, so dashboards see the name exist.
    pub fn family(&mut self, name: &str, kind: Kind, help: &'static str) -> &mut Family {
        self.families.push(Family {
            name: format!("{}_{name}", self.prefix),
            help,
            kind,
            samples: Vec::new(),
        });
        self.families.last_mut().expect("just pushed")
    }

    pub fn gauge(&mut self, name: &str, help: &'static str, value: f64) {
        self.family(name, Kind::Gauge, help).sample(vec![], value);
    }

    pub fn counter(&mut self, name: &str, help: &'static str, value: u64) {
        self.family(name, Kind::Counter, help)
            .sample(vec![], value as f64);
    }

    pub fn render(&self, format: Format) -> String {
        let mut out = String::new();
        for f in &self.families {
            let (kind, sample_name) = match f.kind {
                Kind::Gauge => ("gauge", f.name.clone()),
                Kind::Counter => ("counter", format!("{}_total", f.name)),
            };
            // Text 0.0.4 names a counter's metadata by its sample name.
            let meta_name = match format {
                Format::Text => &sample_name,
                Format::OpenMetrics => &f.name,
            };
            let _ = writeln!(out, "# HELP {meta_name} {}", escape_help(f.help));
            let _ = writeln!(out, "# TYPE {meta_name} {kind}");
            for (labels, value) in &f.samples {
                out.push_str(&sample_name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {}", number(*value));
            }
        }
        if format == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
        out
    }
}

impl Family {
    pub fn sample(&mut self, labels: Labels, value: f64) -> &mut Family {
        self.samples.push((labels, value));
        self
    }
}

/// Integers without a fraction (`1`, `200000000`), others as Rust prints them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_choose_the_format() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        // Prometheus 2.x's scrape Accept header.
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0, text/plain")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=1, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn counters_and_escapes_in_both_formats() {
        let mut f = Families::new("x");
        f.counter("runs", "Runs so far", 3);
        f.family("info", Kind::Gauge, "A \\ help\nline")
            .sample(vec![("v", "a\"b\\c\nd".into())], 1.0)
            .sample(vec![("v", "e".into())], 2.5);
        let text = f.render(Format::Text);
        assert_eq!(
            text,
            "# HELP x_runs_total Runs so far\n# TYPE x_runs_total counter\nx_runs_total 3\n\
             # HELP x_info A \\\\ help\\nline\n# TYPE x_info gauge\n\
             x_info{v=\"a\\\"b\\\\c\\nd\"} 1\nx_info{v=\"e\"} 2.5\n"
        );
        let om = f.render(Format::OpenMetrics);
        assert!(
            om.starts_with("# HELP x_runs Runs so far\n# TYPE x_runs counter\nx_runs_total 3\n")
        );
        assert!(om.ends_with("# EOF\n"));
    }
}
