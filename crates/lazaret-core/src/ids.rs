//! Random identifiers and hex text: bytes from the kernel's CSPRNG
//! (`/dev/urandom`) and their lowercase hex spelling. The one place the
//! host crates make session ids, sandbox ids and temporary names.

use std::io::Read;

/// `count` random bytes from the kernel's CSPRNG.
pub fn random_bytes(count: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; count];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `bytes` random bytes from the kernel's CSPRNG, as hex.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    Ok(hex(&random_bytes(bytes)?))
}

/// `bytes` as lowercase hex, two digits each.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lowercase_digits_per_byte() {
        assert_eq!(hex(&[0, 0x0f, 0xab, 0xff]), "000fabff");
        let id = random_hex(16).expect("urandom");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|byte| byte.is_ascii_hexdigit() && !byte.is_ascii_uppercase()));
    }
}
