//! RoPE's settings of a Llama `config.json`, in both layouts transformers writes: version 4's
//! top-level `rope_theta` and `rope_scaling`, and version 5's `rope_parameters` (which holds
//! `rope_theta` too). A setting given in two places must agree; a `rope_type` other than
//! `default` and `llama3`, and any key the type does not read, are refused by name.

use anyhow::{Result, bail};
use boost_config::{RopeScaling, RopeScalingType};
use serde_json::{Map, Value};
use std::path::Path;

/// The keys a scaled RoPE's dictionary may hold, beside `rope_type` (or its old name `type`)
/// and `rope_theta`.
const LLAMA3_KEYS: [&str; 4] = ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"];

/// `rope_theta` and the scaling a Llama config declares (`theta` is 10000 when no layout gives it).
pub fn rope_of(cfg: &Value, file: &Path) -> Result<(f64, RopeScaling)> {
    let at = |key: &str| format!("{}: config field `{key}`", file.display());
    // Each setting with the config field it came from: (name, field, value).
    let mut found: Vec<(String, String, Value)> = Vec::new();
    if let Some(v) = cfg.get("rope_theta").filter(|v| !v.is_null()) {
        found.push(("rope_theta".into(), "rope_theta".into(), v.clone()));
    }
    for dict in ["rope_scaling", "rope_parameters"] {
        let Some(v) = cfg.get(dict).filter(|v| !v.is_null()) else { continue };
        let Some(map) = v.as_object() else {
            bail!("{} = {v} must be an object of RoPE parameters, or null", at(dict));
        };
        for (k, v) in map {
            let name = if k == "type" { "rope_type" } else { k.as_str() };
            found.push((name.to_string(), format!("{dict}.{k}"), v.clone()));
        }
    }
    // The same setting in two places (transformers 4's and 5's) must say the same.
    let mut settings: Map<String, Value> = Map::new();
    let mut from: Map<String, Value> = Map::new();
    for (name, field, v) in found {
        if let Some(seen) = settings.get(&name) {
            if !same(seen, &v) {
                let other = from[&name].as_str().unwrap_or_default();
                bail!(
                    "{}: config fields `{other}` = {seen} and `{field}` = {v} disagree; transformers 4 reads the \
                     first and 5 the second, so keep one of them or make them equal",
                    file.display()
                );
            }
            continue;
        }
        settings.insert(name.clone(), v);
        from.insert(name, field.into());
    }
    // A setting's config field; one that is missing belongs in the dictionary rope_type is in.
    let dict = from.get("rope_type").and_then(Value::as_str).and_then(|f| f.split_once('.')).map(|(d, _)| d);
    let field = |name: &str| match from.get(name).and_then(Value::as_str) {
        Some(f) => f.to_string(),
        None => format!("{}.{name}", dict.unwrap_or("rope_parameters")),
    };
    let theta = match settings.get("rope_theta") {
        None => 10000.0,
        Some(v) => v.as_f64().filter(|x| x.is_finite() && *x > 0.0).ok_or_else(|| {
            anyhow::anyhow!("{} = {v} must be a positive finite number, e.g. 500000.0", at(&field("rope_theta")))
        })?,
    };
    let kind = match settings.get("rope_type") {
        None => RopeScalingType::None,
        Some(v) if v == "default" => RopeScalingType::None,
        Some(v) if v == "llama3" => RopeScalingType::Llama3,
        Some(v) => bail!(
            "{} = {v} is not supported: import computes RoPE as \"default\" or Llama 3.1's \"llama3\"",
            at(&field("rope_type"))
        ),
    };
    let read: &[&str] = if kind == RopeScalingType::Llama3 { &LLAMA3_KEYS } else { &[] };
    if let Some(top) = cfg.get("partial_rotary_factor").filter(|v| !v.is_null())
        && top.as_f64() != Some(1.0)
    {
        bail!("{} = {top} is not supported: RoPE rotates the whole head", at("partial_rotary_factor"));
    }
    for (name, v) in &settings {
        let known = ["rope_theta", "rope_type"].contains(&name.as_str()) || read.contains(&name.as_str());
        let whole = name == "partial_rotary_factor" && v.as_f64() == Some(1.0);
        if !known && !whole {
            let kind = settings.get("rope_type").map_or("\"default\"".to_string(), Value::to_string);
            bail!(
                "{} = {v} is not supported with rope_type {kind}: import would ignore it and compute another \
                 RoPE than transformers",
                at(&field(name))
            );
        }
    }
    let mut s = RopeScaling { kind, ..RopeScaling::default() };
    if kind == RopeScalingType::Llama3 {
        let number = |name: &str, ok: &dyn Fn(f64) -> bool, want: &str| -> Result<f64> {
            let v = settings
                .get(name)
                .ok_or_else(|| anyhow::anyhow!("{} is missing; llama3 RoPE needs it", at(&field(name))))?;
            v.as_f64()
                .filter(|x| x.is_finite() && ok(*x))
                .ok_or_else(|| anyhow::anyhow!("{} = {v} must be {want}", at(&field(name))))
        };
        s.factor = number("factor", &|x| x >= 1.0, "a number of at least 1, e.g. 8.0")?;
        s.low_freq_factor = number("low_freq_factor", &|x| x > 0.0, "a positive number, e.g. 1.0")?;
        s.high_freq_factor =
            number("high_freq_factor", &|x| x > s.low_freq_factor, "larger than low_freq_factor, e.g. 4.0")?;
        // transformers falls back to max_position_embeddings when the dictionary has none.
        let key = if settings.contains_key("original_max_position_embeddings") {
            field("original_max_position_embeddings")
        } else {
            "max_position_embeddings".into()
        };
        let v = settings.get("original_max_position_embeddings").or(cfg.get("max_position_embeddings"));
        let Some(v) = v else {
            bail!("{} is missing; llama3 RoPE needs it", at("rope_parameters.original_max_position_embeddings"))
        };
        s.original_max_position_embeddings = v
            .as_u64()
            .filter(|&n| n > 0 && n <= 1 << 40)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| anyhow::anyhow!("{} = {v} must be a positive integer, e.g. 8192", at(&key)))?;
    }
    Ok((theta, s))
}

/// Two JSON values naming the same setting: numbers compare by value (500000 = 500000.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}
