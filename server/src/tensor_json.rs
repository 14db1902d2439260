//! A KServe JSON request's tensor values read straight from the body's bytes.
//!
//! serde_json reads every number through its exact f64 parse (the workspace asks for
//! `float_roundtrip`) and the bounded array's visitor, some 70 ns a value, and a 10,000-row
//! tensor holds 830,000 values: about 60 ms of a request whose forward pass takes 3. [`lift`]
//! walks the body once, checking its JSON grammar, and reads each `inputs[i].data` array of
//! plain numbers itself, each value rounded once to the nearest f32 as its digits are read
//! (`float`; serde's f64 parse, narrowed, rounds twice); serde then reads the rest of the
//! body, those arrays emptied, a few hundred bytes.
//!
//! A large array (256 KiB of body or more, the size at which a request takes a place of work on
//! every core, `crate::shed`) is read by one thread per core, each from a comma near its share
//! of the bytes to the next one's; the pieces join only where each ended exactly where the
//! next began, else the array is read again on one thread.
//!
//! It steps aside for anything it does not expect (malformed JSON, a value that is not a
//! finite number, a key given twice or written with an escape, more values than the budget,
//! nesting deeper than serde's limit): the body is then parsed as it always was, so every
//! refusal keeps serde's message, its field and the budget's early stop.

/// What [`lift`] took out of a body.
#[derive(Debug, Clone, PartialEq)]
pub struct Lifted {
    /// The body with each lifted array written as `[]`.
    pub json: Vec<u8>,
    /// The lifted arrays' values, by the index of their input in `inputs`.
    pub data: Vec<(usize, Vec<f32>)>,
}

/// serde_json's own nesting limit: a body nested deeper is left to it, to refuse.
const MAX_DEPTH: usize = 128;

/// From this many bytes on, an array is read by `threads` threads.
pub const SPLIT_BYTES: usize = crate::shed::WHOLE_BODY_BYTES;

/// Lifts the values of every `inputs[i].data` array out of the JSON `body`, at most `budget`
/// values in all, a large array on `threads` threads; `None` where the body is not this
/// pass's to read (see the module's notes).
pub fn lift(body: &[u8], budget: usize, threads: usize) -> Option<Lifted> {
    let mut scan = Scan {
        bytes: body,
        at: 0,
        threads: threads.max(1),
        left: budget,
        copied: 0,
        json: Vec::new(),
        data: Vec::new(),
    };
    scan.value(Place::Root, 0)?;
    scan.whitespace();
    if scan.at != body.len() {
        return None;
    }
    scan.json.extend_from_slice(&body[scan.copied..]);
    Some(Lifted {
        json: scan.json,
        data: scan.data,
    })
}

/// Where a value sits, as far as lifting cares.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    Root,
    /// The value of the root's `inputs`.
    Inputs,
    /// The `i`-th element of `inputs`.
    Input(usize),
    /// The value of that element's `data`.
    Data(usize),
    Elsewhere,
}

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    threads: usize,
    /// Values the budget still allows.
    left: usize,
    /// How much of `bytes` is already in `json`.
    copied: usize,
    json: Vec<u8>,
    data: Vec<(usize, Vec<f32>)>,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        self.at = skip_whitespace(self.bytes, self.at);
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek() == Some(byte)).then(|| self.at += 1)
    }

    fn value(&mut self, place: Place, depth: usize) -> Option<()> {
        self.whitespace();
        match self.peek()? {
            b'{' => self.object(place, depth + 1),
            b'[' if matches!(place, Place::Data(_)) => self.values(place),
            b'[' => self.array(place, depth + 1),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => float(self.bytes, self.at).map(|(_, end)| self.at = end),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A string; its raw bytes between the quotes, or `None` for one with an escape (a key
    /// is compared as written) or a control character.
    fn string(&mut self) -> Option<Result<&'a [u8], ()>> {
        self.eat(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'"' => {
                    let raw = &self.bytes[start..self.at];
                    self.at += 1;
                    return Some(if escaped { Err(()) } else { Ok(raw) });
                }
                b'\\' => {
                    escaped = true;
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.bytes.get(self.at + 1..self.at + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
    }

    fn object(&mut self, place: Place, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        let mut seen = false;
        loop {
            self.whitespace();
            let child = match (place, self.string()?) {
                (_, Err(())) if place != Place::Elsewhere => return None,
                (Place::Root, Ok(b"inputs")) => Place::Inputs,
                (Place::Input(i), Ok(b"data")) => Place::Data(i),
                _ => Place::Elsewhere,
            };
            // A key given twice is serde's to refuse.
            if child != Place::Elsewhere {
                if seen {
                    return None;
                }
                seen = true;
            }
            self.whitespace();
            self.eat(b':')?;
            self.value(child, depth)?;
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, place: Place, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.whitespace();
        if self.eat(b']').is_some() {
            return Some(());
        }
        let mut index = 0;
        loop {
            let child = match place {
                Place::Inputs => Place::Input(index),
                _ => Place::Elsewhere,
            };
            self.value(child, depth)?;
            index += 1;
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A tensor's `data`: an array of finite numbers, lifted out and written as `[]`.
    fn values(&mut self, place: Place) -> Option<()> {
        let Place::Data(input) = place else {
            return None;
        };
        let start = self.at;
        self.eat(b'[')?;
        self.whitespace();
        let (values, end) = if self.eat(b']').is_some() {
            (Vec::new(), self.at)
        } else {
            let first = self.at;
            let split = (self.threads > 1 && self.bytes.len() - first >= SPLIT_BYTES)
                .then(|| numbers_split(self.bytes, first, self.left, self.threads))
                .flatten();
            split.or_else(|| numbers(self.bytes, first, End::Close, self.left))?
        };
        self.left = self.left.checked_sub(values.len())?;
        self.at = end;
        self.json.extend_from_slice(&self.bytes[self.copied..start]);
        self.json.extend_from_slice(b"[]");
        self.copied = self.at;
        self.data.push((input, values));
        Some(())
    }
}

/// Where a run of numbers ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// At the array's `]`.
    Close,
    /// At the comma at this index, inside the array.
    At(usize),
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The finite numbers from `bytes[at..]` (the first one there), comma-separated, to `end`:
/// at most `cap` of them; with where reading stopped (past the `]`, or at the comma).
fn numbers(bytes: &[u8], mut at: usize, end: End, cap: usize) -> Option<(Vec<f32>, usize)> {
    let mut values = Vec::new();
    loop {
        let (v, next) = float(bytes, skip_whitespace(bytes, at))?;
        if !v.is_finite() || values.len() == cap {
            return None;
        }
        values.push(v);
        at = skip_whitespace(bytes, next);
        match (bytes.get(at)?, end) {
            (b',', End::At(stop)) if at == stop => return Some((values, at)),
            (b',', End::At(stop)) if at > stop => return None,
            (b',', _) => at += 1,
            (b']', End::Close) => return Some((values, at + 1)),
            _ => return None,
        }
    }
}

/// [`numbers`] to the array's end on `threads` threads: each from a comma near its share of
/// the bytes after `first` to the next one's. `None` where the pieces do not join (a piece
/// that met anything but numbers and commas before its end, the array ending before the last
/// piece's start, no comma where one was looked for), or hold more than `cap` values.
fn numbers_split(
    bytes: &[u8],
    first: usize,
    cap: usize,
    threads: usize,
) -> Option<(Vec<f32>, usize)> {
    let share = (bytes.len() - first) / threads;
    let mut commas = Vec::with_capacity(threads - 1);
    for t in 1..threads {
        let from = (first + t * share).max(commas.last().map_or(first, |c| c + 1));
        let comma = from + bytes.get(from..)?.iter().position(|&b| b == b',')?;
        commas.push(comma);
    }
    let ends: Vec<End> = commas
        .iter()
        .map(|&c| End::At(c))
        .chain([End::Close])
        .collect();
    let starts: Vec<usize> = std::iter::once(first)
        .chain(commas.iter().map(|c| c + 1))
        .collect();
    let pieces: Vec<Option<(Vec<f32>, usize)>> =
        duet_core::parallel::each(threads, |t| numbers(bytes, starts[t], ends[t], cap))
            .into_iter()
            .map(|piece| piece.ok().flatten())
            .collect();
    let mut values = Vec::with_capacity(pieces.iter().flatten().map(|(v, _)| v.len()).sum());
    let mut at = first;
    for piece in pieces {
        let (piece, end) = piece?;
        values.extend_from_slice(&piece);
        at = end;
    }
    (values.len() <= cap).then_some((values, at))
}

/// A number in JSON's grammar, read as the nearest f32 in the same pass: its digits
/// gathered into an integer while that stays exact in f64 (2^53), the rest only counted;
/// then one exactly rounded f64 operation (Clinger's fast path, `m x 10^e` with both exact)
/// and the narrowing to f32, which is the nearest f32 unless the f64 sits exactly halfway
/// between two (then, or where digits were dropped and the next integer narrows otherwise,
/// or outside the fast path's range, the standard library reads the text).
fn float(bytes: &[u8], start: usize) -> Option<(f32, usize)> {
    /// Up to this a mantissa takes another digit and stays at most 2^53.
    const ROOM: u64 = ((1 << 53) - 9) / 10;
    /// Up to this it takes eight more.
    const EIGHT_ROOM: u64 = ((1 << 53) - 99_999_999) / 100_000_000;
    let mut at = start;
    let negative = bytes.get(at) == Some(&b'-');
    at += usize::from(negative);
    let mut mantissa: u64 = 0;
    let mut exponent: i64 = 0;
    let mut dropped = false;
    match bytes.get(at) {
        Some(b'0') => at += 1,
        Some(b'1'..=b'9') => {
            while let Some(&d @ b'0'..=b'9') = bytes.get(at) {
                if mantissa <= ROOM {
                    mantissa = mantissa * 10 + u64::from(d - b'0');
                } else {
                    dropped |= d != b'0';
                    exponent += 1;
                }
                at += 1;
            }
        }
        _ => return None,
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        let from = at;
        // Eight digits at a time while the mantissa has room for them.
        while mantissa <= EIGHT_ROOM {
            let Some(eight) = eight_digits(bytes, at) else {
                break;
            };
            mantissa = mantissa * 100_000_000 + u64::from(eight);
            exponent -= 8;
            at += 8;
        }
        while let Some(&d @ b'0'..=b'9') = bytes.get(at) {
            if mantissa <= ROOM {
                mantissa = mantissa * 10 + u64::from(d - b'0');
                exponent -= 1;
            } else {
                dropped |= d != b'0';
            }
            at += 1;
        }
        if at == from {
            return None;
        }
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        let sign = match bytes.get(at) {
            Some(b'-') => -1,
            _ => 1,
        };
        at += usize::from(matches!(bytes.get(at), Some(b'-' | b'+')));
        let from = at;
        let mut written: i64 = 0;
        while let Some(&d @ b'0'..=b'9') = bytes.get(at) {
            written = (written * 10 + i64::from(d - b'0')).min(1 << 32);
            at += 1;
        }
        if at == from {
            return None;
        }
        exponent += sign * written;
    }
    let fast = nearest_f32(mantissa, exponent)
        .filter(|v| !dropped || nearest_f32(mantissa + 1, exponent).is_some_and(|w| w == *v));
    let v = match fast {
        Some(v) if negative => -v,
        Some(v) => v,
        None => std::str::from_utf8(&bytes[start..at]).ok()?.parse().ok()?,
    };
    Some((v, at))
}

/// The value of the eight decimal digits at `bytes[at..]`, where there are eight (the bytes
/// read as one little-endian word: checked and combined in a few word operations, not one
/// byte at a time).
fn eight_digits(bytes: &[u8], at: usize) -> Option<u32> {
    let word = u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?);
    // Every byte 0x30 to 0x39: its high nibble 3, and still 3 after adding 6 to the byte.
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    if (word & HIGH) | ((word.wrapping_add(0x0606_0606_0606_0606) & HIGH) >> 4)
        != 0x3333_3333_3333_3333
    {
        return None;
    }
    // Digits to pairs, pairs to fours, fours to the eight (the first digit the lowest byte).
    let v = word - 0x3030_3030_3030_3030;
    let v = v * 10 + (v >> 8);
    const LOW: u64 = 0x0000_00FF_0000_00FF;
    let v1 = (v & LOW).wrapping_mul(100 + (1_000_000 << 32));
    let v2 = ((v >> 16) & LOW).wrapping_mul(1 + (10_000 << 32));
    u32::try_from(v1.wrapping_add(v2) >> 32).ok()
}

/// The f32 nearest `m x 10^e`, where one f64 operation finds it for certain: `m` at most 2^53
/// and `|e|` at most 22 (both operands exact, so the f64 is exactly rounded), and that f64 not
/// exactly halfway between two f32s (narrowing it would round a second time) nor below f32's
/// normal range. `None` where this cannot say.
fn nearest_f32(m: u64, e: i64) -> Option<f32> {
    const POWERS: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    if m == 0 {
        return Some(0.0);
    }
    if m > 1 << 53 {
        return None;
    }
    let power = POWERS.get(usize::try_from(e.unsigned_abs()).ok()?)?;
    #[allow(clippy::cast_precision_loss)]
    let m = m as f64;
    let wide = if e >= 0 { m * power } else { m / power };
    // The 29 bits of an f64's mantissa below an f32's: exactly one half of an f32's last place.
    const BELOW: u64 = (1 << 29) - 1;
    if wide < f64::from(f32::MIN_POSITIVE) || wide.to_bits() & BELOW == 1 << 28 {
        return None;
    }
    #[allow(clippy::cast_possible_truncation)]
    let narrow = wide as f32;
    narrow.is_finite().then_some(narrow)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Values = Vec<(usize, Vec<f32>)>;

    fn lifted(body: &str, budget: usize) -> Option<(String, Values)> {
        lift(body.as_bytes(), budget, 1)
            .map(|l| (String::from_utf8(l.json).expect("utf-8"), l.data))
    }

    #[test]
    fn lifts_each_inputs_data_and_leaves_the_rest_to_serde() {
        let body = r#" {"id": "a\"b", "inputs": [{"name": "pairs", "shape": [2, 2],
            "datatype": "FP32", "parameters": {"data": [1, 2]}, "data": [1, -2.5e0, 0.125,
            -0]}, {"data": [ ], "name": "x"}], "outputs": [{"name": "outputs", "data": [3]}]} "#;
        let (json, data) = lifted(body, 10).expect("lifted");
        assert_eq!(data, vec![(0, vec![1.0, -2.5, 0.125, -0.0]), (1, vec![])]);
        // Only the inputs' own `data` leave; the JSON around them stays as written.
        assert!(
            json.contains(r#""parameters": {"data": [1, 2]}, "data": []}, {"data": [], "name""#)
        );
        assert!(json.contains(r#""outputs": [{"name": "outputs", "data": [3]}]"#));
        let v: serde_json::Value = serde_json::from_str(&json).expect("still JSON");
        assert_eq!(v["inputs"][0]["data"], serde_json::json!([]));
        assert_eq!(v["id"], "a\"b");
        // A body with no tensor values is handed on as it is.
        let (json, data) = lifted(r#"{"inputs": []}"#, 10).expect("lifted");
        assert_eq!((json.as_str(), data.len()), (r#"{"inputs": []}"#, 0));
    }

    #[test]
    fn values_are_the_correctly_rounded_f32_of_what_is_written() {
        let mut rng = duet_core::rng::Rng::new(3);
        let mut texts = vec![
            "0".to_string(),
            "-0.0".into(),
            "1e-45".into(),
            "3.4028235e38".into(),
            "123456789012345678901234567890".into(),
            "0.30000001192092896".into(),
            "1E+2".into(),
            "-7e-1".into(),
        ];
        for _ in 0..2000 {
            #[allow(clippy::cast_possible_truncation)]
            let x = ((rng.unit() - 0.5) * 20.0) as f32;
            // As tritonclient writes FP32 values in JSON: the f32 widened, shortest f64 text.
            texts.push(format!("{}", f64::from(x)));
            texts.push(format!("{x:e}"));
        }
        let body = format!(r#"{{"inputs": [{{"data": [{}]}}]}}"#, texts.join(","));
        let (_, data) = lifted(&body, texts.len()).expect("lifted");
        let want: Vec<f32> = texts.iter().map(|t| t.parse().expect("f32")).collect();
        assert_eq!(data, vec![(0, want)]);
        // Where a value is an f32 written out, serde's reading agrees.
        let serde: serde_json::Value = serde_json::from_str(&body).expect("json");
        for (i, v) in serde["inputs"][0]["data"]
            .as_array()
            .expect("array")
            .iter()
            .enumerate()
            .skip(8)
        {
            #[allow(clippy::cast_possible_truncation)]
            let s = v.as_f64().expect("number") as f32;
            assert_eq!(s.to_bits(), data[0].1[i].to_bits(), "{}", texts[i]);
        }
    }

    #[test]
    fn the_one_pass_reading_is_the_standard_librarys_to_the_bit() {
        let mut rng = duet_core::rng::Rng::new(11);
        let mut texts: Vec<String> = vec![
            "0".into(),
            "-0".into(),
            "0.0e0".into(),
            "9007199254740993".into(),
            "1.00000005960464477539062500001".into(),
            "1.000000059604644775390625".into(),
            "1.0000000596046447753906249999".into(),
            "16777217".into(),
            "0.000000000000000000000000000000000000011754943".into(),
            "1e-40".into(),
            "1E22".into(),
            "1e23".into(),
            "123456789012345678901234567890e-10".into(),
        ];
        for _ in 0..20_000 {
            #[allow(clippy::cast_possible_truncation)]
            let x = ((rng.unit() - 0.5) * 10f64.powi(rng.below(12) as i32 - 6)) as f32;
            texts.push(format!("{}", f64::from(x)));
            // Exactly halfway between x and the next f32, written out in full.
            let next = f32::from_bits(x.to_bits() + 1);
            let half = (f64::from(x) + f64::from(next)) / 2.0;
            texts.push(format!("{half:.40}"));
            texts.push(format!("{half:e}"));
            let digits: String = (0..1 + rng.below(25))
                .map(|_| char::from(b'0' + rng.below(10) as u8))
                .collect();
            let digits = digits.trim_start_matches('0');
            let digits = if digits.is_empty() { "7" } else { digits };
            texts.push(format!("{digits}e{}", rng.below(40) as i64 - 40));
            let cut = rng.below(digits.len());
            texts.push(
                format!("-{}.{}", &digits[..cut.max(1)], &digits[cut.max(1)..])
                    .trim_end_matches('.')
                    .to_string(),
            );
        }
        let body = format!(r#"{{"inputs": [{{"data": [{}]}}]}}"#, texts.join(","));
        let (_, data) = lifted(&body, usize::MAX).expect("lifted");
        for (text, got) in texts.iter().zip(&data[0].1) {
            let want: f32 = text.parse().expect("f32");
            assert_eq!(got.to_bits(), want.to_bits(), "{text}");
        }
    }

    #[test]
    fn a_large_array_read_in_pieces_is_the_array_read_whole() {
        let mut rng = duet_core::rng::Rng::new(5);
        let values: Vec<String> = (0..60_000)
            .map(|_| format!("{}", rng.unit() - 0.5))
            .collect();
        let array = values.join(", ");
        assert!(array.len() > 4 * SPLIT_BYTES);
        let whole = |body: &str, budget| lift(body.as_bytes(), budget, 1);
        for threads in [2, 3, 7] {
            let pieces = |body: &str, budget| lift(body.as_bytes(), budget, threads);
            // The array last, as clients write it; then with as much JSON after it as in it,
            // so that the pieces' commas fall past its end and it is read whole again.
            let last = format!(r#"{{"inputs": [{{"name": "pairs", "data": [{array}]}}]}}"#);
            let middle = format!(
                r#"{{"inputs": [{{"data": [{array}], "parameters": {{"x": [{array}]}}}}]}}"#
            );
            for body in [&last, &middle] {
                let got = pieces(body, usize::MAX).expect("lifted");
                assert_eq!(got.data[0].1.len(), values.len());
                assert_eq!(Some(got), whole(body, usize::MAX), "{threads} threads");
                // The budget holds for the pieces together.
                assert_eq!(pieces(body, values.len() - 1), None);
                assert!(pieces(body, values.len()).is_some());
            }
            // Anything but a number in any piece: the body is serde's.
            let mut spoiled = values.clone();
            spoiled[values.len() * 2 / 3] = "\"x\"".into();
            let spoiled = format!(r#"{{"inputs": [{{"data": [{}]}}]}}"#, spoiled.join(", "));
            assert_eq!(pieces(&spoiled, usize::MAX), None);
            assert_eq!(whole(&spoiled, usize::MAX), None);
        }
    }

    #[test]
    fn steps_aside_for_what_serde_must_judge() {
        let declined = [
            // malformed
            r#"{"inputs": [{"data": [1, 2}]}"#,
            r#"{"inputs": [{"data": [1, 2,]}]}"#,
            r#"{"inputs": [{"data": [01]}]}"#,
            r#"{"inputs": [{"data": [1.]}]}"#,
            r#"{"inputs": [{"data": [.5]}]}"#,
            r#"{"inputs": [{"data": [+1]}]}"#,
            r#"{"inputs": [{"data": [1e]}]}"#,
            r#"{"inputs": [{"data": [1]}]} x"#,
            r#"{"inputs": [{"data": [1]}],}"#,
            r#"{"inputs": [{"data": [1]}]"#,
            "{\"id\": \"a\u{1}\", \"inputs\": [{\"data\": [1]}]}",
            r#"{"id": "\x", "inputs": [{"data": [1]}]}"#,
            r#"{"id": tru, "inputs": [{"data": [1]}]}"#,
            // not plain finite numbers
            r#"{"inputs": [{"data": [1, "2"]}]}"#,
            r#"{"inputs": [{"data": [1, null]}]}"#,
            r#"{"inputs": [{"data": [[1, 2]]}]}"#,
            r#"{"inputs": [{"data": [NaN]}]}"#,
            r#"{"inputs": [{"data": [1e39]}]}"#,
            r#"{"inputs": [{"data": [-1e400]}]}"#,
            // a key twice, or written with an escape
            r#"{"inputs": [{"data": [1], "data": [2]}]}"#,
            r#"{"inputs": [], "inputs": [{"data": [2]}]}"#,
            r#"{"inputs": [{"d\u0061ta": [1]}]}"#,
            r#"{"in\u0070uts": [{"data": [1]}]}"#,
            // over the budget of 3 values
            r#"{"inputs": [{"data": [1, 2, 3, 4]}]}"#,
            r#"{"inputs": [{"data": [1, 2]}, {"data": [3, 4]}]}"#,
        ];
        for body in declined {
            assert_eq!(lifted(body, 3), None, "{body}");
        }
        // Escapes in values and keys elsewhere are not the pass's concern; an escaped key
        // where `inputs` or `data` could be is.
        assert!(lifted(r#"{"id": "\u00e9\n", "inputs": [{"data": [1]}]}"#, 3).is_some());
        assert!(
            lifted(
                r#"{"inputs": [{"parameters": {"\u0064": 1}, "data": [1]}]}"#,
                3
            )
            .is_some()
        );
        assert_eq!(
            lifted(r#"{"i\u0064": "x", "inputs": [{"data": [1]}]}"#, 3),
            None
        );
        assert!(lifted(r#"{"inputs": [{"x": {"data": "y"}, "data": [1]}]}"#, 3).is_some());
        // Nesting past serde's limit.
        let deep = format!(
            r#"{{"id": {}{}, "inputs": []}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(lifted(&deep, 3), None);
        let shallow = format!(
            r#"{{"id": {}{}, "inputs": []}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(lifted(&shallow, 3).is_some());
    }
}
