//! Parquet files, read a row at a time, decoding only the text column.

use super::Document;
use anyhow::{Context, Result, bail};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::Type;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The reader of `path` and the projection onto its UTF-8 string column `field`; errors name the
/// file and the columns there are.
fn open(path: &Path, field: &str) -> Result<(SerializedFileReader<std::fs::File>, Type)> {
    use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = SerializedFileReader::new(file)
        .with_context(|| format!("{} is not a readable Parquet file", path.display()))?;
    let root = reader.metadata().file_metadata().schema_descr().root_schema();
    let fields = root.get_fields();
    let Some(column) = fields.iter().find(|f| f.name() == field) else {
        let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
        bail!(
            "{}: no column \"{field}\" (columns: {}; choose one with --text-field)",
            path.display(),
            names.join(", ")
        );
    };
    let is_string = column.is_primitive()
        && column.get_physical_type() == Physical::BYTE_ARRAY
        && (matches!(column.get_basic_info().logical_type_ref(), Some(LogicalType::String))
            || column.get_basic_info().converted_type() == ConvertedType::UTF8);
    if !is_string {
        bail!("{}: column \"{field}\" is not a UTF-8 string column (choose one with --text-field)", path.display());
    }
    let projection = Type::group_type_builder(root.name()).with_fields(vec![column.clone()]).build()?;
    Ok((reader, projection))
}

/// The number of rows, from the footer (the text column is checked too).
pub(super) fn count(path: &Path, field: &str) -> Result<u64> {
    let (reader, _) = open(path, field)?;
    Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
}

/// Visits each row's document; `len` is the file size, spread over the rows for progress.
pub(super) fn for_each(
    path: &Path,
    field: &str,
    len: u64,
    read: &AtomicU64,
    visit: &mut dyn FnMut(Document) -> Result<()>,
) -> Result<()> {
    use parquet::record::Field;
    let (reader, projection) = open(path, field)?;
    let rows_total = reader.metadata().file_metadata().num_rows().max(1) as u64;
    let rows = reader.get_row_iter(Some(projection)).with_context(|| format!("cannot read {}", path.display()))?;
    let mut reported = 0u64;
    for (i, row) in rows.enumerate() {
        let row = row.with_context(|| format!("{}: row {i}: cannot decode", path.display()))?;
        let text = match row.into_columns().into_iter().next().map(|(_, f)| f) {
            Some(Field::Str(s)) => s,
            Some(Field::Null) | None => bail!("{}: row {i}: \"{field}\" is null", path.display()),
            Some(other) => bail!("{}: row {i}: \"{field}\" is {other:?}, not a string", path.display()),
        };
        let now = len * (i as u64 + 1).min(rows_total) / rows_total;
        read.fetch_add(now - reported, Ordering::Relaxed);
        reported = now;
        visit(Document { name: format!("{}:row {i}", path.display()), text })?;
    }
    Ok(())
}
