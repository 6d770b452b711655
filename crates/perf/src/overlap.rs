//! How much of a bucketed collective stays exposed when it overlaps computation
//! (`parallel.overlap`): data-parallel gradient buckets reduced during the backward pass,
//! ZeRO-1 parameter buckets gathered during the update and the next step's first forward.
//!
//! Model: `b` equal buckets of transfer time `c/b` each, on one link that carries one bucket at
//! a time; bucket `j` becomes ready after a fraction `j/b` of the hiding computation `h` (the
//! layers finish at an even pace). The last transfer ends at
//! `maxⱼ (h·j/b + (b − j + 1)·c/b)`, so what sticks out past `h` is
//! `max(c/b, c − h·(b − 1)/b)`: the last bucket always, all of `c` beyond the hiding time
//! otherwise.

/// Buckets of `bucket_mb` (10⁶ bytes) needed for `bytes`, at least one.
pub fn buckets(bytes: f64, bucket_mb: f64) -> f64 {
    (bytes / (bucket_mb * 1e6)).ceil().max(1.0)
}

/// Exposed time of `comm` seconds in `b` buckets hidden behind `hide` seconds of computation.
pub fn exposed(comm: f64, hide: f64, b: f64) -> f64 {
    (comm / b).max(comm - hide * (b - 1.0) / b).min(comm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bucket_hides_nothing() {
        assert_eq!(exposed(3.0, 10.0, 1.0), 3.0);
    }

    #[test]
    fn short_traffic_leaves_only_the_last_bucket() {
        // 4 buckets of 0.5 s behind 10 s of backward: only the last one's 0.5 s sticks out.
        assert_eq!(exposed(2.0, 10.0, 4.0), 0.5);
    }

    #[test]
    fn long_traffic_sticks_out_by_what_the_computation_cannot_cover() {
        // 4 s in 4 buckets behind 2 s: 2·3/4 = 1.5 s hidden.
        assert_eq!(exposed(4.0, 2.0, 4.0), 2.5);
        // Brute force over the bucket schedule agrees.
        let (c, h, b) = (4.0, 2.0, 4usize);
        let mut link = 0.0f64;
        for j in 1..=b {
            link = link.max(h * j as f64 / b as f64) + c / b as f64;
        }
        assert!((link - h - exposed(c, h, b as f64)).abs() < 1e-12);
    }

    #[test]
    fn bucket_counts_round_up() {
        assert_eq!(buckets(50e6, 25.0), 2.0);
        assert_eq!(buckets(50e6 + 1.0, 25.0), 3.0);
        assert_eq!(buckets(0.0, 25.0), 1.0);
    }
}
