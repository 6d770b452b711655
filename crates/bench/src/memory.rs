//! This process's resident memory, read from `/proc/self/status`, for the peak-memory column
//! of a benchmark.

/// Peak resident memory of this process (VmHWM), MiB: since the start, or since the last
/// [`reset_peak_rss`].
pub fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

/// Start a new peak-memory measurement: hand freed heap pages back to the OS (glibc's
/// `malloc_trim`, so that memory an earlier measurement freed is not counted again), then
/// restart the kernel's peak counter (`/proc/self/clear_refs`, 5). Returns the resident
/// memory the measurement starts from (MiB), or None where the counter cannot be restarted
/// (then [`peak_rss_mib`] is the peak since the process started).
pub fn reset_peak_rss() -> Option<f64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the OS; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    Some(rss_mib())
}

/// Resident memory of this process now (VmRSS), MiB.
pub fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

fn status_mib(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}
