//! A request body's strings measured before it is parsed. serde_json's message for a string
//! where another type belongs quotes the string whole, escaped (six bytes for each control
//! byte), inside the parser: a body of one long string would cost many times its size to
//! refuse. No field of duet's requests takes a long string (an id is at most 200 characters),
//! so a body holding one is refused by the string's length and place, unparsed.

use std::fmt;

/// The longest string a request body may hold, in bytes as written (escapes as sent): far more
/// than any field takes, and what the parser may quote of it stays small.
pub const MAX_STRING_BYTES: usize = 65_536;

/// Nesting a field path is told through (serde_json refuses a body nested deeper than 128).
const MAX_DEPTH: usize = 128;

/// A string longer than the limit, where a body holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongString {
    /// Its opening quote's offset in the body.
    pub at: usize,
    /// Its bytes as written, quotes aside (to the body's end where it is not closed).
    pub bytes: usize,
    /// Whether it is an object's key.
    pub key: bool,
    /// The field that holds it (serde_path_to_error's form, `pairs[3].a.workload`; the object
    /// whose key it is), where it is inside one.
    pub path: Option<String>,
    /// The limit it passed.
    pub limit: usize,
}

impl fmt::Display for LongString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {} of {} bytes at byte {} of the body, longer than any field takes ({} bytes at \
             most)",
            if self.key { "key" } else { "string" },
            self.bytes,
            self.at,
            self.limit
        )
    }
}

/// The first string in `json` longer than `limit` bytes, if any. A body no longer than the
/// limit holds none and is not read; a longer one is read once, byte by byte.
pub fn long_string(json: &[u8], limit: usize) -> Option<LongString> {
    if json.len() <= limit {
        return None;
    }
    let mut at = 0;
    while at < json.len() {
        if json[at] == b'"' {
            let close = string_end(json, at + 1);
            let bytes = close - at - 1;
            if bytes > limit {
                let (path, key) = path_at(json, at);
                return Some(LongString {
                    at,
                    bytes,
                    key,
                    path,
                    limit,
                });
            }
            at = close;
        }
        at += 1;
    }
    None
}

/// The offset of the quote closing the string whose text starts at `start`, or the body's
/// length where none does.
fn string_end(json: &[u8], start: usize) -> usize {
    let mut at = start;
    while at < json.len() {
        match json[at] {
            b'"' => return at,
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
    json.len()
}

/// Where the enclosing objects and arrays stand while a body is read.
enum Frame {
    /// An object: the key read last (its text's bounds), and whether a key comes next.
    Object {
        key: Option<(usize, usize)>,
        expects_key: bool,
    },
    Array {
        index: usize,
    },
}

/// The field path of the string opening at `open` (read from the body's start), and whether
/// that string is a key.
fn path_at(json: &[u8], open: usize) -> (Option<String>, bool) {
    let mut frames: Vec<Frame> = Vec::new();
    let mut depth = 0usize;
    let mut at = 0;
    while at < open {
        match json[at] {
            b'{' | b'[' => {
                depth += 1;
                if depth <= MAX_DEPTH {
                    frames.push(if json[at] == b'{' {
                        Frame::Object {
                            key: None,
                            expects_key: true,
                        }
                    } else {
                        Frame::Array { index: 0 }
                    });
                }
            }
            b'}' | b']' => {
                if depth <= MAX_DEPTH {
                    frames.pop();
                }
                depth = depth.saturating_sub(1);
            }
            b',' if depth <= MAX_DEPTH => match frames.last_mut() {
                Some(Frame::Object { expects_key, .. }) => *expects_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            b':' if depth <= MAX_DEPTH => {
                if let Some(Frame::Object { expects_key, .. }) = frames.last_mut() {
                    *expects_key = false;
                }
            }
            b'"' => {
                let close = string_end(json, at + 1);
                if depth <= MAX_DEPTH
                    && let Some(Frame::Object {
                        key,
                        expects_key: true,
                    }) = frames.last_mut()
                {
                    *key = Some((at + 1, close));
                }
                at = close;
            }
            _ => {}
        }
        at += 1;
    }
    let key = depth <= MAX_DEPTH
        && matches!(
            frames.last(),
            Some(Frame::Object {
                expects_key: true,
                ..
            })
        );
    if key {
        frames.pop();
    }
    let mut path = String::new();
    for frame in &frames {
        match frame {
            Frame::Object {
                key: Some((start, end)),
                ..
            } => {
                // A key's text unescaped, as the parser names it; `?` where it cannot be.
                let text = json
                    .get(start - 1..=*end)
                    .and_then(|quoted| serde_json::from_slice::<String>(quoted).ok());
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(text.as_deref().unwrap_or("?"));
            }
            Frame::Object { key: None, .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push('?');
            }
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    let path = super::known_path(&path).map(|p| super::clipped_at(p, super::ERROR_TEXT_BYTES));
    (path, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(json: &str, limit: usize) -> Option<(usize, usize, bool, Option<String>)> {
        long_string(json.as_bytes(), limit).map(|l| (l.at, l.bytes, l.key, l.path))
    }

    #[test]
    fn the_first_long_string_is_found_with_its_field() {
        let long = "x".repeat(20);
        let json = format!(
            r#"{{"gpu":"v100","pairs":[{{"a":{{"workload":"w"}}}},{{"a":{{"workload":"{long}"}}}}]}}"#
        );
        let at = json.find(&long).expect("in it") - 1;
        assert_eq!(
            found(&json, 10),
            Some((at, 20, false, Some("pairs[1].a.workload".into())))
        );
        assert_eq!(found(&json, 20), None);
        // A string where an object belongs, at the top.
        assert_eq!(
            found(&format!(r#"{{"gpu":"v100","pairs":"{long}"}}"#), 10),
            Some((22, 20, false, Some("pairs".into())))
        );
        // The body itself.
        assert_eq!(
            found(&format!(r#""{long}""#), 10),
            Some((0, 20, false, None))
        );
    }

    #[test]
    fn escapes_are_counted_as_written_and_do_not_end_a_string() {
        let json = r#"{"k":"a\"b\\\"cdefghij","n":1}"#;
        // `a\"b\\\"cdefghij`: 16 bytes as written.
        assert_eq!(found(json, 15), Some((5, 16, false, Some("k".into()))));
        assert_eq!(found(json, 16), None);
        // A key with an escape is named as the parser names it.
        let json = r#"{"k\u00e9":["0123456789abcdef"]}"#;
        assert_eq!(found(json, 10), Some((12, 16, false, Some("ké[0]".into()))));
    }

    #[test]
    fn a_long_key_names_the_object_holding_it() {
        let long = "k".repeat(30);
        let json = format!(r#"{{"profiles":{{"v100":{{"{long}":1}}}}}}"#);
        assert_eq!(
            found(&json, 10),
            Some((21, 30, true, Some("profiles.v100".into())))
        );
        let json = format!(r#"{{"{long}":1}}"#);
        assert_eq!(found(&json, 10), Some((1, 30, true, None)));
    }

    #[test]
    fn a_string_left_open_runs_to_the_end() {
        let json = format!(r#"{{"a":[1,2],"b":"{}"#, "z".repeat(40));
        assert_eq!(found(&json, 30), Some((15, 40, false, Some("b".into()))));
        // A trailing backslash does not read past the end.
        let json = format!(r#"{{"b":"{}\"#, "z".repeat(40));
        assert_eq!(found(&json, 30), Some((5, 41, false, Some("b".into()))));
    }

    #[test]
    fn a_path_past_the_parser_s_depth_is_told_to_its_depth() {
        let json = format!(
            "{}\"{}\"{}",
            "[".repeat(200),
            "s".repeat(20),
            "]".repeat(200)
        );
        let (at, bytes, key, path) = found(&json, 10).expect("found");
        assert_eq!((at, bytes, key), (200, 20, false));
        assert_eq!(path.expect("a path"), "[0]".repeat(MAX_DEPTH));
    }

    #[test]
    fn short_bodies_and_short_strings_pass() {
        assert_eq!(found(r#"{"a":"0123456789"}"#, 100), None);
        let many = format!("[{}]", vec![r#""0123456789""#; 1000].join(","));
        assert_eq!(found(&many, 10), None);
        assert_eq!(found(&many, 9).map(|f| f.3), Some(Some("[0]".into())));
    }
}
