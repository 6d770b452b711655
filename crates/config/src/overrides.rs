//! `--set key=value` overrides applied to the TOML tree before it is typed.

use crate::ConfigError;
use toml::{Table, Value};

/// Parse the right-hand side of `--set key=value` as a TOML literal
/// (number, bool, string, array); anything that is not valid TOML is a bare string.
fn parse_value(raw: &str) -> Value {
    let doc = format!("v = {raw}");
    match doc.parse::<Table>() {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.to_string())),
        Err(_) => Value::String(raw.to_string()),
    }
}

/// Apply one `key=value` override (dotted key) to a TOML table.
pub fn apply_set(table: &mut Table, assignment: &str) -> Result<(), ConfigError> {
    let Some((key, raw)) = assignment.split_once('=') else {
        return Err(ConfigError::new(
            assignment,
            "an override must look like `--set section.key=value`, e.g. `--set train.steps=100`",
        ));
    };
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) || parts.len() < 2 {
        return Err(ConfigError::new(key, "an override key needs a section and a name, e.g. `train.steps`"));
    }
    let mut cur = table;
    for (i, part) in parts[..parts.len() - 1].iter().enumerate() {
        let entry = cur.entry(part.to_string()).or_insert_with(|| Value::Table(Table::new()));
        cur = match entry {
            Value::Table(t) => t,
            _ => {
                return Err(ConfigError::new(
                    parts[..=i].join("."),
                    "is a value, not a section; it cannot hold sub-keys",
                ));
            }
        };
    }
    let raw = raw.trim();
    let value = parse_value(raw);
    // A whole number TOML cannot hold would otherwise reach the typed config as a string
    // ("invalid type: string, expected usize").
    if value.is_str() && past_i64(raw) {
        return Err(ConfigError::new(key, format!("{raw} is out of range: integers are at most {}", i64::MAX)));
    }
    cur.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

/// A decimal integer as TOML writes one (an optional sign, no leading zero, `_` separators)
/// outside i64's range. Other digit strings (`007`) stay strings, as before.
fn past_i64(raw: &str) -> bool {
    let plain = raw.replace('_', "");
    let digits = plain.strip_prefix(['+', '-']).unwrap_or(&plain);
    let integer = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    integer && plain.parse::<i64>().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed() {
        let mut t = Table::new();
        apply_set(&mut t, "train.steps=12").unwrap();
        apply_set(&mut t, "model.arch=cola").unwrap();
        apply_set(&mut t, "parallel.grouping=false").unwrap();
        apply_set(&mut t, "train.lr=3e-3").unwrap();
        assert_eq!(t["train"]["steps"].as_integer(), Some(12));
        assert_eq!(t["model"]["arch"].as_str(), Some("cola"));
        assert_eq!(t["parallel"]["grouping"].as_bool(), Some(false));
        assert_eq!(t["train"]["lr"].as_float(), Some(3e-3));
    }

    #[test]
    fn malformed_overrides_name_the_problem() {
        let mut t = Table::new();
        let e = apply_set(&mut t, "steps").unwrap_err();
        assert!(e.message.contains("section.key=value"));
        let e = apply_set(&mut t, "steps=3").unwrap_err();
        assert!(e.message.contains("section"));
        apply_set(&mut t, "train.steps=3").unwrap();
        let e = apply_set(&mut t, "train.steps.x=3").unwrap_err();
        assert_eq!(e.key, "train.steps");
        // Past i64: named as out of range, not typed as a string.
        for big in ["99999999999999999999", "-9223372036854775809"] {
            let e = apply_set(&mut t, &format!("train.steps={big}")).unwrap_err();
            assert_eq!(e.key, "train.steps");
            assert!(e.message.contains("out of range") && e.message.contains(big), "{}", e.message);
        }
        apply_set(&mut t, "train.steps=9223372036854775807").unwrap();
        // Strings that only start like numbers, or that TOML does not read as integers
        // (a leading zero), stay strings.
        for s in ["123abc", "007"] {
            apply_set(&mut t, &format!("data.dir={s}")).unwrap();
            assert_eq!(t["data"]["dir"].as_str(), Some(s));
        }
    }
}
