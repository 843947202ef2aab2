//! PCI config space as any reader may get it (cut at any length, all ones,
//! capability lists that loop or point anywhere) and the ACS record the agent
//! keeps (`gpudirect-acs.json`, garbled): the parsers never panic, a short
//! read is never taken for "no ACS", and a record is taken whole or refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_node_agent::concerns::gpudirect::{acs_fix, pcie};
use rdma_node_agent::host::pci_config::PciIdentity;

fuzz_target!(|data: &[u8]| {
    let c = pcie::parse_config(data);
    // Fewer than 256 bytes can never show the extended space where ACS is.
    if data.len() < 256 {
        assert!(!matches!(c.acs, pcie::Acs::Absent | pcie::Acs::Present { .. }));
    }
    if let pcie::Acs::Present { offset, .. } = c.acs {
        assert!(offset >= 0x100 && usize::from(offset) + 8 <= data.len());
    }
    if let Some(i) = PciIdentity::of(data) {
        assert_ne!(i.vendor, 0xffff);
    }
    // The image read_config builds says the same as the whole.
    let mut read = |at: u64, len: usize| {
        let at = (at as usize).min(data.len());
        Ok(data[at..(at + len).min(data.len())].to_vec())
    };
    if let Ok(image) = pcie::read_config(&mut read) {
        if data.len() == 4096 || data.len() <= 256 {
            assert_eq!(pcie::parse_config(&image).acs, c.acs);
        }
    }
    if let Ok(r) = acs_fix::parse_record(data) {
        assert!(
            r.ports
                .keys()
                .all(|b| rdma_node_agent::host::pci_config::is_bdf(b))
        );
    }
});
