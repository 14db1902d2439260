//! The one linear solver duet's least squares share: the effects prior's profile ridge
//! (`prior::profile`) and the trainer's ridge baseline both solve their normal equations here.

/// Solves `A w = b` for a symmetric positive definite `A` (`n` x `n`, row-major, read from its
/// lower triangle and overwritten by its Cholesky factor). A pivot that rounding leaves at or
/// below zero is taken as 1e-12, so a penalised system (every one duet builds) never divides by
/// zero.
pub fn solve_spd(a: &mut [f64], b: &[f64], n: usize) -> Vec<f64> {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        let d = d.max(1e-12).sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    let mut z = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|k| a[i * n + k] * z[k]).sum();
        z[i] = (b[i] - s) / a[i * n + i];
    }
    let mut w = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[k * n + i] * w[k]).sum();
        w[i] = (z[i] - s) / a[i * n + i];
    }
    w
}

#[cfg(test)]
mod tests {
    use super::solve_spd;

    #[test]
    fn solves_a_positive_definite_system() {
        // A = [[4, 2, 0], [2, 5, 1], [0, 1, 3]], w = [1, -2, 0.5].
        let a0 = [4.0, 2.0, 0.0, 2.0, 5.0, 1.0, 0.0, 1.0, 3.0];
        let w = [1.0, -2.0, 0.5];
        let b: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| a0[i * 3 + j] * w[j]).sum())
            .collect();
        let mut a = a0;
        let got = solve_spd(&mut a, &b, 3);
        for (g, e) in got.iter().zip(w) {
            assert!((g - e).abs() < 1e-12, "{got:?}");
        }
    }

    #[test]
    fn an_empty_system_has_an_empty_solution() {
        assert!(solve_spd(&mut [], &[], 0).is_empty());
    }
}
