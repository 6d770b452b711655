//! Every float key must be a finite number. NaN passes every `<` and `>` check a key's own
//! validation makes (`train.grad_clip = nan` turned clipping off) and an infinity surfaces
//! later under another key's name, so one walk over the whole config refuses both, naming the
//! key; a key added later is covered without a line here.

use crate::{Config, ConfigError};
use toml::Value;

/// The first float of `cfg` that is NaN or infinite, as an error naming its dotted key.
pub(crate) fn check(cfg: &Config) -> Result<(), ConfigError> {
    match Value::try_from(cfg) {
        Ok(v) => walk("", &v),
        // Serializing a config cannot fail; nothing to check if it somehow does.
        Err(_) => Ok(()),
    }
}

fn walk(key: &str, v: &Value) -> Result<(), ConfigError> {
    let join = |k: &str| if key.is_empty() { k.to_string() } else { format!("{key}.{k}") };
    match v {
        Value::Float(x) if !x.is_finite() => {
            Err(ConfigError::new(key, format!("is {x}; it must be a finite number (not nan or inf)")))
        }
        Value::Table(t) => t.iter().try_for_each(|(k, v)| walk(&join(k), v)),
        Value::Array(a) => a.iter().enumerate().try_for_each(|(i, v)| walk(&format!("{key}[{i}]"), v)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply_set;

    /// Every float key of the default config, by its dotted name.
    fn float_keys() -> Vec<String> {
        fn collect(key: &str, v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Float(_) => out.push(key.to_string()),
                Value::Table(t) => {
                    for (k, v) in t {
                        collect(&if key.is_empty() { k.clone() } else { format!("{key}.{k}") }, v, out);
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        collect("", &Value::try_from(Config::from_toml_str("").unwrap()).unwrap(), &mut out);
        out
    }

    #[test]
    fn every_float_key_refuses_nan_and_infinities_by_name() {
        let keys = float_keys();
        for k in ["train.grad_clip", "train.weight_decay", "train.lr", "model.rope_theta", "data.val_fraction"] {
            assert!(keys.iter().any(|x| x == k), "{k} is a float key: {keys:?}");
        }
        for key in &keys {
            for bad in ["nan", "inf", "-inf", "+inf"] {
                let mut t = toml::Table::new();
                apply_set(&mut t, &format!("{key}={bad}")).unwrap();
                let e = Config::from_table(t).unwrap_err();
                assert_eq!(e.key, *key, "{key}={bad}: {e}");
            }
        }
        for key in ["train.grad_clip", "train.weight_decay"] {
            let mut t = toml::Table::new();
            apply_set(&mut t, &format!("{key}=nan")).unwrap();
            let e = Config::from_table(t).unwrap_err();
            assert!(e.message.contains("finite number"), "{key}=nan passes its own check: {e}");
        }
        let mix = "[data]\nmix = [{ dir = \"a\", weight = 1.0 }, { dir = \"b\", weight = nan }]\n";
        assert_eq!(Config::from_toml_str(mix).unwrap_err().key, "data.mix[1].weight");
        let file = Config::from_toml_str("[train]\nweight_decay = inf\n").unwrap_err();
        assert_eq!(
            file.to_string(),
            "config key `train.weight_decay`: is inf; it must be a finite number (not nan or inf)"
        );
    }
}
