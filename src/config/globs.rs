//! Glob patterns in the agent config are checked at load: a pattern that
//! cannot compile must be a config error naming its key, line and column (toml
//! attaches the span of the value), never a pattern that silently matches nothing.

use serde::{Deserialize, Deserializer};

fn check<E: serde::de::Error>(key: &str, p: &str) -> Result<(), E> {
    glob::Pattern::new(p)
        .map(|_| ())
        .map_err(|e| E::custom(format!("{key}: invalid glob pattern {p:?}: {e}")))
}

fn list<'de, D: Deserializer<'de>>(key: &str, d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    for p in &v {
        check::<D::Error>(key, p)?;
    }
    Ok(v)
}

pub fn shared_plugin_sockets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    list("rdma.shared_plugin_sockets", d)
}

pub fn ignore_ports<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    list("rdma.ignore_ports", d)
}

pub fn rdma_resources<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    list("kubelet.rdma_resources", d)
}

pub fn report_resources<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    list("kubelet.report_resources", d)
}

pub fn expected_resources<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    list("kubelet.expected_resources", d)
}

pub fn expect_port_device<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let p = String::deserialize(d)?;
    check::<D::Error>("rdma.expect_port.device", &p)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use crate::concerns::registry::SECTIONS;
    use crate::config::Config;
    use std::path::Path;

    fn err(text: &str) -> String {
        Config::parse(text, Path::new("c.toml"), SECTIONS)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn invalid_globs_are_located_config_errors() {
        let e = err("[rdma]\nshared_plugin_sockets = [\"ok*.sock\", \"[bad.sock\"]\n");
        assert!(e.starts_with("c.toml:2:25: "), "{e}");
        assert!(
            e.contains("rdma.shared_plugin_sockets") && e.contains("[bad.sock"),
            "{e}"
        );
        let e = err("\n[kubelet]\nrdma_resources = [\"rdma/[\"]\n");
        assert!(e.starts_with("c.toml:3:18: "), "{e}");
        assert!(e.contains("kubelet.rdma_resources"), "{e}");
        let e = err("[kubelet]\nreport_resources = [\"a[\"]\n");
        assert!(e.contains("kubelet.report_resources"), "{e}");
        let e = err("[kubelet]\nexpected_resources = [\"***\"]\n");
        assert!(e.contains("kubelet.expected_resources"), "{e}");
        let e = err("[[rdma.expect_port]]\ndevice = \"mlx5_[\"\n");
        assert!(e.starts_with("c.toml:2:10: "), "{e}");
        assert!(e.contains("rdma.expect_port.device"), "{e}");
        let e = err("[rdma]\nignore_ports = [\"mlx5_[0/1\"]\n");
        assert!(e.contains("rdma.ignore_ports"), "{e}");
        // Valid ones load.
        Config::parse(
            "[rdma]\nshared_plugin_sockets = [\"*shared*.sock\"]\n[kubelet]\nrdma_resources = [\"rdma/*\"]\n",
            Path::new("c.toml"), SECTIONS,
        )
        .unwrap();
    }
}
