//! Every HTTP client of the agent starts here (`status` asking the daemon,
//! `fleet` asking Prometheus). reqwest is built with rustls but without a
//! crypto provider of its own (no aws-lc-rs to compile), and panics building a
//! client when none is installed: this installs ring's first.

/// A blocking client builder with the crypto provider in place.
pub fn blocking_builder() -> reqwest::blocking::ClientBuilder {
    // An error only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_builds() {
        super::blocking_builder().build().unwrap();
    }
}
