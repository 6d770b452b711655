//! What every writer of BOOST shares to keep a user's files safe (docs/SAFETY.md), in one
//! place:
//!
//! - [`temp`]: temporary files and folders beside their final path, removed on drop and on an
//!   interrupt unless renamed into place;
//! - [`staging`]: an output folder built beside its path and renamed into place, replacing an
//!   earlier one only once complete, or only a missing or empty folder; what killed runs left
//!   beside it cleared or put back;
//! - [`interrupt`] and [`signals`]: the one registration of SIGINT and SIGTERM, the removal of
//!   what was being built, and the renames an interrupt waits for;
//! - [`checksum`]: the SHA-256 of files that manifests list and readers verify.
//!
//! User guide: `docs/SAFETY.md`.

pub mod checksum;
pub mod interrupt;
pub mod signals;
pub mod staging;
pub mod temp;

pub use staging::{Staged, recover};
pub use temp::{TempPath, parent_dir, temp_dir_in, temp_file_in};
