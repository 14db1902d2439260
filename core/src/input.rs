//! Reading a file a user names: a regular file whole, anything else (a pipe such as `<(...)`,
//! a device) up to a bound, so that `/dev/zero` or an endless pipe is refused instead of
//! filling memory; text without the byte-order mark some editors put first.

use std::io::Read;
use std::path::Path;

/// The most bytes read from a file that is not a regular one (its length is not known before).
pub const MAX_STREAM_BYTES: u64 = 1 << 30;

/// `path`'s bytes; the error says why, without the path (callers name it as their errors do).
pub fn read(path: &Path) -> Result<Vec<u8>, String> {
    read_bounded(path, MAX_STREAM_BYTES)
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    // A regular file's length is known: it is read whole, however large.
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    let most = if regular { u64::MAX } else { limit };
    let mut bytes = Vec::new();
    file.take(most.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > most {
        return Err(format!(
            "not a regular file, and it gives more than {limit} bytes (a device such as \
             /dev/zero, or a pipe that does not end?)"
        ));
    }
    Ok(bytes)
}

/// `path`'s text: UTF-8, a leading byte-order mark left out.
pub fn read_text(path: &Path) -> Result<String, String> {
    text(read(path)?)
}

fn text(bytes: Vec<u8>) -> Result<String, String> {
    let mut text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (the byte at offset {} is not)",
            e.utf8_error().valid_up_to()
        )
    })?;
    let mark = text.len() - without_bom(&text).len();
    text.drain(..mark);
    Ok(text)
}

/// `text` without a leading UTF-8 byte-order mark (which JSON parsers read as a stray value).
pub fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_read_up_to_the_bound_and_refused_past_it() {
        let err = read_bounded(Path::new("/dev/zero"), 1 << 16).expect_err("endless");
        assert!(err.contains("not a regular file"), "{err}");
        assert_eq!(
            read_bounded(Path::new("/dev/null"), 1 << 16).expect("empty"),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn a_regular_file_is_read_whole_past_the_bound() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 100]).expect("write");
        assert_eq!(read_bounded(&path, 10).expect("whole").len(), 100);
        let err = read_bounded(&dir.path().join("missing"), 10).expect_err("missing");
        assert!(err.starts_with("cannot open"), "{err}");
    }

    #[test]
    fn text_drops_a_byte_order_mark_and_names_bad_bytes() {
        assert_eq!(text(b"\xef\xbb\xbf{}".to_vec()).expect("utf-8"), "{}");
        assert_eq!(
            text(b"{}\xef\xbb\xbf".to_vec()).expect("utf-8"),
            "{}\u{feff}"
        );
        let err = text(b"ab\xff".to_vec()).expect_err("not utf-8");
        assert!(err.contains("offset 2"), "{err}");
    }
}
