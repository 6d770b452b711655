//! Fault injection through the binary: nothing a user has is lost or silently changed. Each
//! case hashes the user's files before and after, and checks that the message names the
//! thing (path, key, PID, step).

#[path = "../common/mod.rs"]
mod common;
mod resume;
mod resume_changes;
mod stops;
