//! Kubernetes resource quantities read as whole counts (GPUs asked by a container, GPUs a node
//! advertises), by the API's grammar: a signed decimal number and one suffix, binary (`Ki` to
//! `Ei`), decimal (`n`, `u`, `m`, none, `k`, `M` to `E`) or an exponent (`e3`, `E-2`). The API
//! server writes a quantity back in canonical form, so a pod asking 1,000 GPUs arrives as `1k`
//! and one asking `2000m` as `2`: both must count as what they are.

/// The whole count a quantity names, the most a `u32` holds where it names more; none where the
/// text is not a quantity, is negative, or is not a whole number (`0.5`, `1500m`). A mantissa of
/// more than 38 significant digits is read exactly only where its size alone decides (past
/// `u32`, or below one). White space around it is dropped, as the API server reads JSON.
pub fn whole_count(text: &str) -> Option<u32> {
    let text = text.trim();
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.len() + fraction.len() == 0 || fraction.contains('.') {
        return None;
    }
    let (ten, two) = suffix_exponents(suffix)?;
    // The mantissa's significant digits and the power of ten they are scaled by.
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    if significant.is_empty() {
        return Some(0);
    }
    if negative {
        return None;
    }
    let trailing_zeros = (digits.len() - significant.len()) as i64;
    let ten = ten - fraction.len() as i64 + trailing_zeros;
    // log10 of the value is at least this (2^10 > 10^3), and below it plus one.
    let magnitude = significant.len() as i64 - 1 + ten + two * 3 / 10;
    if magnitude >= 10 {
        return Some(u32::MAX);
    }
    if magnitude < -1 || significant.len() > 38 {
        // Below one, or too long to hold: a value below 10^10 with 39 significant digits and
        // no trailing zero has a fraction in any case but a contrived binary one.
        return None;
    }
    let mantissa: u128 = significant.parse().ok()?;
    let value = if ten >= 0 {
        10u128
            .checked_pow(u32::try_from(ten).ok()?)
            .and_then(|p| mantissa.checked_mul(p))
            .and_then(|v| v.checked_mul(1u128 << two))
    } else {
        // mantissa * 2^two / 10^k = mantissa / 5^k * 2^(two - k): whole only where 5^k divides
        // the mantissa and what is left of 2^k is in 2^two or the quotient.
        let k = u32::try_from(-ten).ok()?;
        let fives = 5u128.checked_pow(k)?;
        if !mantissa.is_multiple_of(fives) {
            return None;
        }
        let quotient = mantissa / fives;
        let two = u32::try_from(two).ok()?;
        if two >= k {
            quotient.checked_mul(1u128 << (two - k))
        } else if quotient.trailing_zeros() >= k - two {
            Some(quotient >> (k - two))
        } else {
            return None;
        }
    };
    Some(value.map_or(u32::MAX, |v| u32::try_from(v).unwrap_or(u32::MAX)))
}

/// The powers of ten and of two a suffix scales by; none where it is not one.
fn suffix_exponents(suffix: &str) -> Option<(i64, i64)> {
    let decimal = |ten: i64| Some((ten, 0));
    let binary = |two: i64| Some((0, two));
    match suffix {
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exponent = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let (sign, digits) = match exponent.as_bytes().first() {
                Some(b'-') => (-1, &exponent[1..]),
                Some(b'+') => (1, &exponent[1..]),
                _ => (1, exponent),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Past a billion the value is far past u32 or far below one either way.
            let size = digits
                .trim_start_matches('0')
                .parse::<i64>()
                .map_or(1_000_000_000, |e| e.min(1_000_000_000));
            decimal(sign * size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::whole_count;

    #[test]
    fn quantities_count_as_the_api_server_reads_them() {
        let max = Some(u32::MAX);
        for (text, count) in [
            ("0", Some(0)),
            ("1", Some(1)),
            ("+2", Some(2)),
            ("007", Some(7)),
            ("1k", Some(1000)),
            ("2000m", Some(2)),
            ("8000000000n", Some(8)),
            ("3000000u", Some(3)),
            ("1e3", Some(1000)),
            ("1E3", Some(1000)),
            ("1000e-3", Some(1)),
            ("1e+2", Some(100)),
            ("1Ki", Some(1024)),
            ("0.5Ki", Some(512)),
            ("0.25Ki", Some(256)),
            (".5k", Some(500)),
            ("5.", Some(5)),
            ("1.50k", Some(1500)),
            ("-0", Some(0)),
            ("0.000", Some(0)),
            ("4294967295", max),
            ("4294967296", max),
            ("1E", max),
            ("1Ei", max),
            ("1e100000000000000000000", max),
            ("99999999999999999999999999999999999999999999", max),
            ("0.5", None),
            ("1500m", None),
            ("1e-3", None),
            ("0.001Ki", None),
            ("1e-100000000000000000000", None),
            ("-1", None),
            ("-1k", None),
            ("", None),
            (".", None),
            ("+", None),
            ("k", None),
            ("1K", None),
            ("1kk", None),
            ("1e", None),
            ("1e+", None),
            ("1.2.3", None),
            (" 1", Some(1)),
            (" +2 ", Some(2)),
            ("1 k", None),
            ("one", None),
            ("1\u{661}", None),
        ] {
            assert_eq!(whole_count(text), count, "{text:?}");
        }
    }
}
