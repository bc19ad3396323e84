//! The import path of the agent's bundle (D13): the header the host parses
//! itself, from a whole buffer and as the coordinator reads it, streamed
//! from the file. Any bytes either parse into oids and refnames that pass
//! the checks, with the pack offset inside the input, or are refused; both
//! readings agree; never a panic.
#![no_main]

use lazaret_core::git_bundle::BundleHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = BundleHeader::parse(data);
    if let Ok(header) = &parsed {
        assert!(header.pack_offset + 4 <= data.len());
        assert_eq!(&data[header.pack_offset..header.pack_offset + 4], b"PACK");
        for (oid, name) in header.refs.iter().map(|(oid, name)| (oid, name)).chain(header.prerequisites.iter().map(|oid| (oid, oid))) {
            assert_eq!(oid.len(), 40);
            assert!(oid.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{oid}");
            if name != oid {
                assert!(name.starts_with("refs/") && !name.contains("..") && !name.contains("@{"), "{name}");
                assert!(!name.chars().any(|c| c.is_control() || c == ' ' || c == ':'), "{name:?}");
            }
        }
    }
    // Streamed through a small buffer, as `quarantine::import` reads the file.
    let mut reader = std::io::BufReader::with_capacity(13, data);
    let streamed = BundleHeader::read(&mut reader).expect("reading a slice cannot fail");
    assert_eq!(streamed, parsed);
});
