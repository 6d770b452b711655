//! Locking a mutex whose holder panicked: the state stays usable, so the other ranks can still
//! report the failure instead of panicking in turn.

use std::sync::{Mutex, MutexGuard};

/// `m`'s guard, also when a holder of `m` panicked.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
