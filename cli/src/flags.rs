//! Checks of flag values that several commands share; every refusal names its flag.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};

/// The most seconds a flag may give, and why, for its refusal.
#[derive(Debug, Clone, Copy)]
pub struct MaxSeconds {
    pub seconds: f64,
    pub why: &'static str,
}

/// Waits for an answer, a connection or a next look: at most an hour.
pub const WAIT: MaxSeconds = MaxSeconds {
    seconds: 3600.0,
    why: "an hour",
};

/// Measurements (a profiler's warm-up and windows, a workload's run): at most a day, as a
/// measured window may legitimately be long.
pub const MEASURE: MaxSeconds = MaxSeconds {
    seconds: 86_400.0,
    why: "a day: a measurement may be long, but not endless",
};

/// `value` seconds of `flag` as a duration: refused unless finite, above 0 and at most `max`
/// (so that it never overflows a [`Duration`]).
pub fn seconds(flag: &str, value: f64, max: MaxSeconds) -> Result<Duration> {
    if !(value.is_finite() && value > 0.0 && value <= max.seconds) {
        bail!(
            "{flag} {value}: must be a number of seconds above 0 and at most {} ({})",
            max.seconds,
            max.why
        );
    }
    Ok(Duration::from_secs_f64(value))
}

/// A count or size `value` of `flag`, refused when 0 (nothing could ever pass it).
pub fn positive(flag: &str, value: usize) -> Result<usize> {
    if value == 0 {
        bail!("{flag} 0: must be at least 1");
    }
    Ok(value)
}

/// The widest hidden layer a fit takes: a layer of 16,384 x 16,384 weights is 1 GiB in fp32.
pub const MAX_HIDDEN_WIDTH: usize = 16_384;

/// The most weights of one member: 2^30, 4 GiB in fp32.
pub const MAX_MEMBER_WEIGHTS: usize = 1 << 30;

/// The most ensemble members: every member answers every pair served.
pub const MAX_ENSEMBLE: usize = 256;

/// `--hidden` and `--ensemble` of a fit, refused past the sizes above, where they would only fail
/// to allocate (or be killed for memory) after the data was read.
pub fn network_size(hidden: &[usize], ensemble: usize) -> Result<()> {
    if let Some(w) = hidden.iter().find(|w| **w > MAX_HIDDEN_WIDTH) {
        bail!(
            "--hidden {w}: a layer may be {MAX_HIDDEN_WIDTH} wide at most (a layer of \
             {MAX_HIDDEN_WIDTH} x {MAX_HIDDEN_WIDTH} weights is 1 GiB in fp32)"
        );
    }
    let weights = hidden
        .windows(2)
        .map(|w| w[0] * w[1])
        .fold(0usize, usize::saturating_add);
    if weights > MAX_MEMBER_WEIGHTS {
        bail!(
            "--hidden: {weights} weights between the hidden layers, more than the \
             {MAX_MEMBER_WEIGHTS} (4 GiB in fp32) a member may have"
        );
    }
    if ensemble > MAX_ENSEMBLE {
        bail!(
            "--ensemble {ensemble}: at most {MAX_ENSEMBLE} members (every member answers every \
             pair served)"
        );
    }
    Ok(())
}

/// `value` of `flag`, refused when empty (or only spaces).
pub fn not_empty<'v>(flag: &str, value: &'v str) -> Result<&'v str> {
    if value.trim().is_empty() {
        bail!("{flag}: empty");
    }
    Ok(value)
}

/// A dataset's name: `--name`, refused when empty, else the name of its output folder `out`
/// (`fallback` where `out` has none, as `/` or `..`).
pub fn dataset_name(name: Option<String>, out: &Path, fallback: &str) -> Result<String> {
    match name {
        Some(name) => Ok(not_empty("--name", &name)?.to_string()),
        None => Ok(out.file_name().map_or_else(
            || fallback.to_string(),
            |n| n.to_string_lossy().into_owned(),
        )),
    }
}

/// The `--date` of a provenance, `YYYY-MM-DD` (a real calendar date); today's without one.
pub fn date(value: Option<String>) -> Result<String> {
    match value {
        None => Ok(duet_core::timestamp::today()),
        Some(text) => match duet_core::timestamp::parse_date(&text) {
            Ok(_) => Ok(text),
            Err(e) => bail!("--date: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_no_device_holds_is_refused_naming_its_flag() {
        assert!(network_size(&[32, 32], 5).is_ok());
        assert!(network_size(&[MAX_HIDDEN_WIDTH, 4], MAX_ENSEMBLE).is_ok());
        let refused = |hidden: &[usize], ensemble| {
            network_size(hidden, ensemble)
                .expect_err("refused")
                .to_string()
        };
        // `--hidden 100000000` was killed for memory; `--ensemble 4000000000` aborted.
        assert!(refused(&[100_000_000], 5).starts_with("--hidden 100000000: a layer may be"));
        assert!(refused(&[16_384; 8], 5).contains("more than the 1073741824"));
        assert!(refused(&[32], 4_000_000_000).starts_with("--ensemble 4000000000: at most 256"));
    }

    #[test]
    fn seconds_are_finite_positive_and_bounded() {
        assert_eq!(
            seconds("--timeout", 2.5, WAIT).expect("accepted"),
            Duration::from_millis(2500)
        );
        assert!(seconds("--timeout", 3600.0, WAIT).is_ok());
        assert!(seconds("--window", 86_400.0, MEASURE).is_ok());
        for (value, max) in [
            (f64::INFINITY, WAIT),
            (f64::NAN, WAIT),
            (1e20, WAIT),
            (1e30, MEASURE),
            (0.0, WAIT),
            (-1.0, MEASURE),
            (3600.5, WAIT),
        ] {
            let err = seconds("--flag", value, max)
                .expect_err("refused")
                .to_string();
            assert!(err.starts_with("--flag "), "{err}");
            assert!(err.contains(&format!("at most {}", max.seconds)), "{err}");
        }
        let err = seconds("--window", 1e30, MEASURE)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("a day: a measurement may be long"), "{err}");
    }

    #[test]
    fn a_date_is_a_calendar_day_written_yyyy_mm_dd() {
        assert_eq!(
            date(Some("2024-02-29".into())).expect("a leap day"),
            "2024-02-29"
        );
        assert_eq!(date(None).expect("today").len(), 10);
        for bad in [
            "2026-02-29",
            "2026-13-01",
            "26-12-01",
            "2026-12-1",
            "yesterday",
            "",
        ] {
            let err = date(Some(bad.into())).expect_err(bad).to_string();
            assert!(
                err.starts_with("--date: ") && err.contains("YYYY-MM-DD"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_zero_count_is_refused_naming_its_flag() {
        assert_eq!(positive("--max-nodes", 3).expect("positive"), 3);
        let err = positive("--max-nodes", 0).expect_err("zero").to_string();
        assert_eq!(err, "--max-nodes 0: must be at least 1");
    }

    #[test]
    fn an_empty_value_is_refused_naming_its_flag() {
        assert_eq!(not_empty("--gpu", "a100").expect("given"), "a100");
        let err = not_empty("--gpu", " ").expect_err("empty").to_string();
        assert_eq!(err, "--gpu: empty");
    }
}
