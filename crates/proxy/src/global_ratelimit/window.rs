//! The sliding-window arithmetic of a global limit, free of I/O and clocks.
//!
//! Time is cut into fixed windows of `window_ms` (aligned on the Unix epoch, so that
//! every data plane cuts them alike). The count over the last `window_ms` is estimated
//! from the previous window's count, weighted by the share of it that still overlaps the
//! sliding window, plus the current window's count: under a steady rate the estimate is
//! exact, and a burst at the end of one window still counts at the start of the next
//! (the classic fixed-window flaw of admitting twice the limit around an edge).

use std::time::Duration;

/// The fixed window `now_ms` falls in, and how far into it.
pub(crate) fn position(now_ms: u64, window_ms: u64) -> (u64, u64) {
    let w = window_ms.max(1);
    (now_ms / w, now_ms % w)
}

/// Whether one more request fits: `prev × (window − elapsed) / window + current + 1 ≤
/// requests`, in integers (scaled by the window, so nothing is rounded).
pub(crate) fn admits(requests: u32, prev: u64, current: u64, elapsed: u64, window_ms: u64) -> bool {
    let w = u128::from(window_ms.max(1));
    let elapsed = u128::from(elapsed).min(w);
    let weighted = u128::from(prev) * (w - elapsed) + (u128::from(current) + 1) * w;
    weighted <= u128::from(requests) * w
}

/// How long until one more request would fit, if nothing else is admitted meanwhile:
/// within this window once enough of the previous one has slid out, else after the
/// window ends (when the current count becomes the previous one and starts sliding out).
pub(crate) fn retry_after(
    requests: u32,
    prev: u64,
    current: u64,
    elapsed: u64,
    window_ms: u64,
) -> Duration {
    let w = window_ms.max(1);
    let room = u64::from(requests).saturating_sub(current + 1);
    let wait_ms = if current < u64::from(requests) && prev > 0 {
        // prev × (w − e) ≤ room × w  ⇔  e ≥ w − room × w / prev
        let needed = w.saturating_sub(room.saturating_mul(w) / prev);
        needed.saturating_sub(elapsed)
    } else {
        // Into the next window, until enough of this one has slid out.
        let next = current.max(1);
        let room_next = u64::from(requests).saturating_sub(1);
        let needed = w.saturating_sub(room_next.saturating_mul(w) / next);
        (w - elapsed.min(w)) + needed
    };
    Duration::from_millis(wait_ms.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_on_the_epoch() {
        assert_eq!(position(12_345, 1_000), (12, 345));
        assert_eq!(position(60_000, 60_000), (1, 0));
    }

    #[test]
    fn an_empty_previous_window_is_a_fixed_window() {
        assert!(admits(10, 0, 9, 500, 1000));
        assert!(!admits(10, 0, 10, 500, 1000));
    }

    /// At the start of a window the previous one counts whole; half-way, half of it.
    #[test]
    fn the_previous_window_slides_out() {
        assert!(!admits(10, 10, 0, 0, 1000));
        assert!(admits(10, 10, 4, 500, 1000), "5 + 4 + 1 = 10 fits");
        assert!(!admits(10, 10, 5, 500, 1000), "5 + 5 + 1 = 11 does not");
        assert!(
            !admits(10, 10, 5, 501, 1000),
            "4.99 + 5 + 1 does not either"
        );
        assert!(admits(10, 10, 0, 100, 1000), "9 + 0 + 1");
    }

    /// A steady rate at the limit is admitted but for one request per window: at a
    /// window's first instant the estimate still counts the whole previous window.
    #[test]
    fn a_steady_rate_at_the_limit_is_exact() {
        // 100 per second, one every 10 ms, over many windows.
        let (requests, window) = (100u32, 1000u64);
        let (mut prev, mut cur, mut current_w, mut admitted) = (0u64, 0u64, 0u64, 0u64);
        for t in (0..10_000u64).step_by(10) {
            let (w, e) = position(t, window);
            if w != current_w {
                prev = if w == current_w + 1 { cur } else { 0 };
                cur = 0;
                current_w = w;
            }
            if admits(requests, prev, cur, e, window) {
                cur += 1;
                admitted += 1;
            }
        }
        assert!((990..=1000).contains(&admitted), "{admitted}");
    }

    /// Offered 3× the limit, the admitted count over whole windows is the limit (less
    /// about one per window, at the edges).
    #[test]
    fn overload_admits_the_limit() {
        let (requests, window) = (100u32, 1000u64);
        let (mut prev, mut cur, mut current_w, mut admitted) = (0u64, 0u64, 0u64, 0u64);
        for t in 0..30_000u64 {
            // 300 per second: one every 3.33 ms.
            if t % 10 > 2 {
                continue;
            }
            let (w, e) = position(t / 10 * 10 + (t % 10) * 3, window);
            if w != current_w {
                prev = if w == current_w + 1 { cur } else { 0 };
                cur = 0;
                current_w = w;
            }
            if admits(requests, prev, cur, e, window) {
                cur += 1;
                admitted += 1;
            }
        }
        // 30 windows' worth offered at 3×.
        assert!((2940..=3000).contains(&admitted), "{admitted}");
    }

    #[test]
    fn retry_after_points_at_room() {
        // Full current window, nothing before: after this window, room at once.
        let r = retry_after(10, 0, 10, 400, 1000);
        assert!(r >= Duration::from_millis(600), "{r:?}");
        // A full previous window, nothing yet: after a tenth has slid out.
        let r = retry_after(10, 10, 0, 0, 1000);
        assert_eq!(r, Duration::from_millis(100));
        assert!(admits(10, 10, 0, 100, 1000));
    }
}
