//! The header of a bundle the agent writes (the import path, D13): any
//! bytes either parse into oids and refnames that pass the checks, with the
//! pack offset inside the input, or are refused; never a panic.
#![no_main]

use lazaret_core::git_bundle::BundleHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = BundleHeader::parse(data) {
        assert!(header.pack_offset + 4 <= data.len());
        assert_eq!(&data[header.pack_offset..header.pack_offset + 4], b"PACK");
        for (oid, name) in &header.refs {
            assert_eq!(oid.len(), 40);
            assert!(name.starts_with("refs/") && !name.contains(".."));
        }
    }
});
