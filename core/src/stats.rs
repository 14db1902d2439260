//! Order statistics shared by the profiler (p95 of counter readings) and the simulator (p50 and
//! p99 of completion times). The dataset summary (`dataset::summary::Quantiles`) interpolates
//! between order statistics instead, for a table a person reads; these pick one observed value.

/// The `q` quantile (0 to 1) of ascending `sorted` by nearest rank: the value at index
/// `round((n - 1) q)`. 0 for no values.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let i = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The `q` quantile of `values` in any order (sorted on a copy).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    nearest_rank(&sorted, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_an_observed_value() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0];
        assert_eq!(nearest_rank(&xs, 0.5), 6.0);
        assert_eq!(nearest_rank(&xs, 0.9), 10.0);
        assert_eq!(nearest_rank(&xs, 0.0), 1.0);
        assert_eq!(nearest_rank(&xs, 1.0), 11.0);
        assert_eq!(nearest_rank(&[], 0.5), 0.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
    }
}
