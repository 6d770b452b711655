//! Reused message buffers: a steady state of sends allocates nothing.

/// A buffer out of `pool`: one with room for `words` words if there is one, else any, else a
/// new one.
pub fn take(pool: &mut Vec<Vec<u64>>, words: usize) -> Vec<u64> {
    match pool.iter().position(|v| v.capacity() >= words) {
        Some(i) => pool.swap_remove(i),
        None => pool.pop().unwrap_or_default(),
    }
}

/// `v` holding `words` zero words.
pub fn zeroed(mut v: Vec<u64>, words: usize) -> Vec<u64> {
    v.clear();
    v.resize(words, 0);
    v
}
