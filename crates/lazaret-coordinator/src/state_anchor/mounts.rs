//! Mount points: `/proc/<pid>/mountinfo` parsing (with its octal escapes)
//! and `umount2`.

use std::ffi::CString;
use std::io::ErrorKind;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// `umount2(path, flags)`: detaches the mount at `path` (the topmost one, if
/// stacked). Fails with EINVAL when `path` is not a mount point.
pub(super) fn unmount_path(path: &Path, flags: i32) -> std::io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: `c_path` is a NUL-terminated string that lives across the call;
    // umount2 only reads it and has no other memory effects on this process.
    let status = unsafe { nix::libc::umount2(c_path.as_ptr(), flags) };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MountPoint {
    pub(super) path: PathBuf,
    fs_type: String,
}

/// `/proc/<pid>/mountinfo`: field 5 is the mount point (octal escapes for
/// space, tab, newline and backslash), the field after ` - ` the type.
pub(super) fn parse_mountinfo(text: &[u8]) -> Vec<MountPoint> {
    let mut mounts = Vec::new();
    for line in text.split(|&byte| byte == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&byte| byte == b' ').collect();
        let Some(separator) = fields.iter().position(|field| *field == b"-") else { continue };
        if fields.len() < 5 || separator < 6 || separator + 1 >= fields.len() {
            continue;
        }
        mounts.push(MountPoint {
            path: PathBuf::from(std::ffi::OsString::from_vec(unescape_octal(fields[4]))),
            fs_type: String::from_utf8_lossy(fields[separator + 1]).into_owned(),
        });
    }
    mounts
}

fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut index = 0;
    while index < field.len() {
        if field[index] == b'\\'
            && index + 4 <= field.len()
            && field[index + 1..index + 4].iter().all(|digit| (b'0'..=b'7').contains(digit))
        {
            let value = field[index + 1..index + 4].iter().fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
            bytes.push(u8::try_from(value).unwrap_or(b'?'));
            index += 4;
        } else {
            bytes.push(field[index]);
            index += 1;
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_is_parsed_with_escapes() {
        let text = b"22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
109 27 0:90 / /data/d/usr_merged rw,nodev,noatime - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0\n\
110 27 0:91 / /data/my\\040dir/x_merged rw - fuse.fuse-overlayfs fuse-overlayfs rw\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[1], MountPoint { path: PathBuf::from("/data/d/usr_merged"), fs_type: "fuse.fuse-overlayfs".into() });
        assert_eq!(mounts[2].path, PathBuf::from("/data/my dir/x_merged"));
        assert_eq!(mounts[0].fs_type, "ext4");
    }
}
