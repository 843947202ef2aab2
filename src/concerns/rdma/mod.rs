//! The RDMA concerns: the device and port inventory (`rdma.devices`, with the
//! GPUDirect modules) and the subsystem's network-namespace mode (`rdma.netns`).
//!
//! gather (sysfs, /proc, modprobe.d under the root) → decide (pure) → checks + plan.

pub mod concern;
pub mod counters;
pub mod devices;
pub mod gpudirect;
pub mod link;
pub mod netns;
pub mod peers;
