//! systemd: the LimitMEMLOCK drop-in concern. The service manager it and the
//! executor talk to lives in the host layer (`host::service`, `host::dbus`).

pub mod concern;
pub mod dropin;
pub mod reasons;
