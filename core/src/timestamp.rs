//! Dates and times as duet writes and reads them: RFC 3339 timestamps (`2026-12-01T12:00:00Z`,
//! an offset or fractional seconds allowed) to seconds since 1970 (UTC), and back; the proleptic
//! Gregorian calendar only, no time zone database.

use std::time::{SystemTime, UNIX_EPOCH};

/// The proleptic Gregorian date of a day counted from 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (year, month as u32, day as u32)
}

/// The day counted from 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// The ASCII digits of `text` in `range` as a number; `None` where any is not a digit.
fn digits(text: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let part = text.get(range)?;
    part.bytes()
        .all(|c| c.is_ascii_digit())
        .then(|| part.parse().ok())
        .flatten()
}

/// Why the `YYYY-MM-DD` at the start of a text is not a date.
enum DateFault {
    /// Not digits where the year, month or day go.
    Digits,
    /// Not `-` between them.
    Separators,
    /// Digits and separators, but no such day of the calendar.
    Calendar,
}

/// The year, month and day written `YYYY-MM-DD` at the start of `text` (what follows is the
/// caller's): the date part that `parse_date` and `parse_rfc3339` share.
fn leading_date(text: &str) -> Result<(i64, u32, u32), DateFault> {
    let (Some(year), Some(month), Some(day)) =
        (digits(text, 0..4), digits(text, 5..7), digits(text, 8..10))
    else {
        return Err(DateFault::Digits);
    };
    let b = text.as_bytes();
    if b[4] != b'-' || b[7] != b'-' {
        return Err(DateFault::Separators);
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (month, day) = (month as u32, day as u32);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(DateFault::Calendar);
    }
    Ok((year, month, day))
}

/// Seconds since 1970-01-01T00:00:00Z now.
#[allow(clippy::cast_precision_loss)]
pub fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Today's date as `YYYY-MM-DD` (UTC).
pub fn today() -> String {
    date(now_seconds())
}

/// The UTC date of `seconds` since 1970 as `YYYY-MM-DD`.
#[allow(clippy::cast_possible_truncation)]
pub fn date(seconds: f64) -> String {
    let (y, m, d) = civil_from_days((seconds / 86_400.0).floor() as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Parses a calendar date written `YYYY-MM-DD` (proleptic Gregorian, four-digit year) to its
/// year, month and day. The error says what is wrong.
pub fn parse_date(text: &str) -> Result<(i64, u32, u32), String> {
    match (text.len(), leading_date(text)) {
        (10, Ok(date)) => Ok(date),
        (10, Err(DateFault::Calendar)) => Err(format!("`{text}`: no such date (YYYY-MM-DD)")),
        _ => Err(format!(
            "`{text}` is not a date written YYYY-MM-DD (for example 2026-12-01)"
        )),
    }
}

/// `seconds` since 1970 as an RFC 3339 timestamp in UTC, to the second.
#[allow(clippy::cast_possible_truncation)]
pub fn rfc3339(seconds: f64) -> String {
    let whole = seconds.floor() as i64;
    let (y, m, d) = civil_from_days(whole.div_euclid(86_400));
    let s = whole.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Parses an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, `t` or a space
/// for `T`, `z` for `Z`) to seconds since 1970 (UTC). The error says what is wrong.
pub fn parse_rfc3339(text: &str) -> Result<f64, String> {
    let fail = |why: &str| {
        Err(format!(
            "`{text}` is not an RFC 3339 timestamp (for example 2026-12-01T12:00:00Z): {why}"
        ))
    };
    let b = text.as_bytes();
    if b.len() < 20 {
        return fail("too short");
    }
    let date = leading_date(text);
    let (Some(hour), Some(minute), Some(second), false) = (
        digits(text, 11..13),
        digits(text, 14..16),
        digits(text, 17..19),
        matches!(date, Err(DateFault::Digits)),
    ) else {
        return fail("expected digits in YYYY-MM-DDTHH:MM:SS");
    };
    if matches!(date, Err(DateFault::Separators))
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return fail("expected YYYY-MM-DDTHH:MM:SS");
    }
    let Ok((year, month, day)) = date else {
        return fail("no such date");
    };
    // 60 is a leap second, counted as the next second's start.
    if hour > 23 || minute > 59 || second > 60 {
        return fail("no such time of day");
    }
    let mut rest = &text[19..];
    let mut fraction = 0.0;
    if let Some(after) = rest.strip_prefix('.') {
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return fail("a `.` with no digits after it");
        }
        fraction = format!("0.{}", &after[..n]).parse().unwrap_or(0.0);
        rest = &after[n..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return fail("expected Z or an offset such as +02:00 after the time"),
            };
            let (Some(h), Some(m)) = (
                (rest.len() == 6 && rest.as_bytes()[3] == b':')
                    .then(|| rest[1..3].parse::<i64>().ok())
                    .flatten(),
                (rest.len() == 6)
                    .then(|| rest[4..6].parse::<i64>().ok())
                    .flatten(),
            ) else {
                return fail("expected Z or an offset such as +02:00 after the time");
            };
            if h > 23 || m > 59 {
                return fail("no such offset");
            }
            sign * (h * 3600 + m * 60)
        }
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    #[allow(clippy::cast_precision_loss)]
    Ok(seconds as f64 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_787), (2026, 11, 30));
        for days in [-800_000, -1, 0, 59, 11_016, 20_787, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn dates_are_calendar_days_written_yyyy_mm_dd() {
        assert_eq!(parse_date("2026-12-01"), Ok((2026, 12, 1)));
        assert_eq!(parse_date("2000-02-29"), Ok((2000, 2, 29)));
        for bad in [
            "2026-02-29",
            "1900-02-29",
            "2026-04-31",
            "2026-00-10",
            "2026-13-01",
            "2026-12-00",
            "2026-12-1",
            "26-12-01",
            "2026/12/01",
            "2026-12-01T00:00:00Z",
            "+026-12-01",
            "２０２６-12-01",
            "",
        ] {
            let err = parse_date(bad).expect_err(bad);
            assert!(err.contains(bad) && err.contains("YYYY-MM-DD"), "{err}");
        }
    }

    #[test]
    fn timestamps_parse_with_offsets_and_fractions() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0.0));
        assert_eq!(parse_rfc3339("2026-12-01T12:00:00Z"), Ok(1_796_126_400.0));
        assert_eq!(
            parse_rfc3339("2026-12-01T14:00:00+02:00"),
            parse_rfc3339("2026-12-01T12:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2026-12-01t12:00:00.25z"),
            Ok(1_796_126_400.25)
        );
        assert_eq!(rfc3339(1_796_126_400.7), "2026-12-01T12:00:00Z");
        assert_eq!(date(1_796_126_400.0), "2026-12-01");
        for bad in [
            "2026-12-01",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T12:00:00",
            "2026-12-01T12:00:00+2:00",
            "2026-12-01T12:00:00.Z",
            "yesterday at noon, UTC",
        ] {
            let err = parse_rfc3339(bad).expect_err(bad);
            assert!(err.contains(bad) && err.contains("RFC 3339"), "{err}");
        }
    }
}
