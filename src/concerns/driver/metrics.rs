//! The `driver.health` families of the exposition (see `metrics`): two summary
//! series on a healthy node, and series only for problems (a reporter in
//! error state, a reporter with errors, a fatal driver message in the kernel
//! log), so a healthy 8-NIC node spends 2 of its 150 series here.

use crate::exposition::{Families, Kind};
use crate::observe::Observation;

pub fn driver_health(m: &mut Families, seen: &[Observation]) {
    let Some((reporters, log_read, problems)) = seen.iter().find_map(|o| match o {
        Observation::DriverHealth {
            reporters,
            kernel_log_read,
            problems,
        } => Some((*reporters, *kernel_log_read, problems)),
        _ => None,
    }) else {
        return;
    };
    // Nothing when devlink was not read (a tree under --root): no 0 that reads
    // as "no reporter".
    if let Some(n) = reporters {
        m.family(
            "driver_health_reporters",
            Kind::Gauge,
            "devlink health reporters driver.health watches (those of the RDMA NICs' devlink instances and of [driver_health] also_watch); no series when devlink could not be read",
        )
        .sample(vec![], n as f64);
    }
    if let Some(read) = log_read {
        m.family(
            "driver_health_kernel_log_readable",
            Kind::Gauge,
            "1 when the last pass read the kernel log (/dev/kmsg) to its end, 0 when it could not (see the check's message); no series when [driver_health] kernel_log = false",
        )
        .sample(vec![], f64::from(u8::from(read)));
    }
    let in_error = m.family(
        "driver_health_reporter_in_error",
        Kind::Gauge,
        "1 for each devlink health reporter in error state; no series for healthy ones",
    );
    for (instance, reporter, _, _) in problems.iter().filter(|p| p.2 == "reporter_error") {
        in_error.sample(
            vec![
                ("instance", instance.clone()),
                ("reporter", reporter.clone()),
            ],
            1.0,
        );
    }
    let errors = m.family(
        "driver_health_reporter_errors",
        Kind::Counter,
        "Errors a devlink health reporter counted since its driver registered it (the kernel's error count); no series for reporters without errors",
    );
    for (instance, reporter, _, n) in problems.iter().filter(|p| p.2 == "reporter_errors") {
        errors.sample(
            vec![
                ("instance", instance.clone()),
                ("reporter", reporter.clone()),
            ],
            *n as f64,
        );
    }
    let log = m.family(
        "driver_log_messages",
        Kind::Counter,
        "mlx5 driver messages of each documented fatal pattern (fatal_error, health_compromised, cmd_timeout, fw_syndrome) in the kernel log since boot, per PCI function; no series for patterns not seen",
    );
    for (device, pattern, _, n) in problems.iter().filter(|p| p.2 == "kernel_log") {
        log.sample(
            vec![("device", device.clone()), ("pattern", pattern.clone())],
            *n as f64,
        );
    }
}
