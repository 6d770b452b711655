//! A Hugging Face Llama folder: `config.json`, the weights in `model.safetensors` or in shards
//! listed by `model.safetensors.index.json`, and `tokenizer.json`. The weight files are mapped,
//! their headers checked against the shapes the config implies before anything is allocated;
//! weights are read as f32 (from f32, bf16 or f16), each checked to be finite.
//! A config field of the wrong type, a weight file whose header does not add up, and a tensor
//! the config does not account for are errors naming the file and the field or tensor.

use super::llama::{LlamaShape, expected_names, is_expected, llama_shape};
use anyhow::{Context, Result, bail};
use safetensors::tensor::TensorInfo;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

pub struct Folder {
    pub dir: PathBuf,
    pub shape: LlamaShape,
    /// Tensor name → the file holding it.
    files: HashMap<String, PathBuf>,
    /// Each weight file, mapped (read as the tensors are, nothing copied up front).
    loaded: HashMap<PathBuf, Mapped>,
}

/// A weight file's bytes: memory-mapped, or read when it is too small to map.
enum Mapped {
    Map(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapped::Map(m) => m,
            Mapped::Read(v) => v,
        }
    }
}

/// Maps `file` read-only (a file of a few bytes is read instead: an empty one cannot be mapped).
fn map(file: &Path) -> Result<Mapped> {
    let f = fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let len = f.metadata().with_context(|| format!("cannot read {}", file.display()))?.len();
    if len < 4096 {
        return Ok(Mapped::Read(fs::read(file).with_context(|| format!("cannot read {}", file.display()))?));
    }
    // SAFETY: a read-only mapping of a file the import only reads; a file changed under it by
    // another process could change the values read, as with any reader of model files.
    let m = unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("cannot memory-map {}", file.display()))?;
    Ok(Mapped::Map(m))
}

/// How many unaccounted tensors an error lists by name.
const LISTED: usize = 5;
/// `bytes` (the contents of `file`) as safetensors; where the header does not add up, the error
/// names the tensor whose entry is inconsistent.
fn parse<'a>(bytes: &'a [u8], file: &Path) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| match inconsistent_entry(bytes) {
        Some(why) => anyhow::anyhow!("{} is not valid safetensors: {why}", file.display()),
        None => anyhow::anyhow!("{} is not safetensors: {e}", file.display()),
    })
}

/// The first header entry whose dtype and shape do not fit its data offsets, in words.
fn inconsistent_entry(bytes: &[u8]) -> Option<String> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let header: BTreeMap<String, Value> = serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let mut entries: Vec<(String, TensorInfo)> = header
        .into_iter()
        .filter(|(name, _)| name != "__metadata__")
        .filter_map(|(name, v)| Some((name, serde_json::from_value::<TensorInfo>(v).ok()?)))
        .collect();
    entries.sort_by_key(|(_, info)| info.data_offsets);
    entries.into_iter().find_map(|(name, info)| {
        let (s, e) = info.data_offsets;
        let bits = info.shape.iter().try_fold(info.dtype.bitsize(), |a, &x| a.checked_mul(x));
        let want = bits.filter(|b| b % 8 == 0).map(|b| b / 8);
        (e.checked_sub(s) != want).then(|| {
            format!(
                "the header entry of tensor {name} says dtype {:?} and shape {:?} ({}), but its data_offsets \
                 [{s}, {e}] span {} bytes; the header was edited or the file is damaged",
                info.dtype,
                info.shape,
                want.map_or("an impossible size".to_string(), |w| format!("{w} bytes")),
                e as i128 - s as i128
            )
        })
    })
}

/// `[i₀, i₁, …]` of flat index `i` in a row-major tensor of `shape`.
fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for (k, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            c[k] = i % n;
            i /= n;
        }
    }
    c
}

impl Folder {
    pub fn open(dir: &Path) -> Result<Self> {
        let cfg_file = dir.join("config.json");
        let text = fs::read_to_string(&cfg_file).with_context(|| format!("cannot read {}", cfg_file.display()))?;
        let cfg: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", cfg_file.display()))?;
        let shape = llama_shape(&cfg, &cfg_file)?;
        let index = dir.join("model.safetensors.index.json");
        let mut files = HashMap::new();
        let weight_files = if index.is_file() {
            let text = fs::read_to_string(&index).with_context(|| format!("cannot read {}", index.display()))?;
            let v: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", index.display()))?;
            let map =
                v["weight_map"].as_object().with_context(|| format!("{} has no `weight_map`", index.display()))?;
            for (name, file) in map {
                let Some(file) = file.as_str() else {
                    bail!("{}: the entry for tensor {name} is {file}, not a file name", index.display());
                };
                if file.is_empty() {
                    bail!("{}: the entry for tensor {name} names an empty file name", index.display());
                }
                let f = dir.join(file);
                if !f.is_file() {
                    bail!("{}: shard {} (holding {name}) is missing", index.display(), f.display());
                }
                files.insert(name.clone(), f);
            }
            let mut shards: Vec<PathBuf> = files.values().cloned().collect();
            shards.sort();
            shards.dedup();
            shards
        } else {
            let single = dir.join("model.safetensors");
            if !single.is_file() {
                bail!("{} has neither model.safetensors nor model.safetensors.index.json", dir.display());
            }
            vec![single]
        };
        let indexed = index.is_file().then_some(index);
        let mut folder = Self { dir: dir.to_path_buf(), shape, files, loaded: HashMap::new() };
        folder.load_all(weight_files, indexed.as_deref())?;
        folder.bound_layers(&cfg_file)?;
        folder.refuse_unaccounted()?;
        folder.check_shapes()?;
        Ok(folder)
    }

    /// Reads every weight file (checking its header). Without an index, records the tensors
    /// each holds; with one, a tensor must be in the file the index names and in no other, or
    /// which copy is read would depend on the order the files are read in.
    fn load_all(&mut self, weight_files: Vec<PathBuf>, index: Option<&Path>) -> Result<()> {
        let mut found: HashMap<String, PathBuf> = HashMap::new();
        for file in weight_files {
            let bytes = map(&file)?;
            for name in parse(&bytes, &file)?.names() {
                if let Some(first) = found.insert(name.to_string(), file.clone()) {
                    bail!(
                        "tensor {name} is in two weight files, {} and {}; remove one copy",
                        first.display(),
                        file.display()
                    );
                }
                match (index, self.files.get(name)) {
                    (None, _) => {
                        self.files.insert(name.to_string(), file.clone());
                    }
                    (Some(_), Some(listed)) if *listed == file => {}
                    (Some(index), Some(listed)) => bail!(
                        "tensor {name} is in {}, but {} lists it in {}; fix the index or the shards",
                        file.display(),
                        index.display(),
                        listed.display()
                    ),
                    (Some(index), None) => bail!(
                        "tensor {name} is in {} but not listed in {}; fix the index or the shards",
                        file.display(),
                        index.display()
                    ),
                }
            }
            self.loaded.insert(file, bytes);
        }
        if let Some(index) = index
            && let Some((name, file)) = self.files.iter().find(|(n, _)| !found.contains_key(*n))
        {
            bail!("{} lists tensor {name} in {}, which does not hold it", index.display(), file.display());
        }
        Ok(())
    }

    /// `num_hidden_layers` must not run past the last layer the weight files hold: named here,
    /// before any layer's tensors are looked for.
    fn bound_layers(&self, cfg_file: &Path) -> Result<()> {
        let top = self
            .files
            .keys()
            .filter_map(|n| n.strip_prefix("model.layers.")?.split('.').next()?.parse::<usize>().ok())
            .max();
        if top.is_some_and(|t| self.shape.layers <= t.saturating_add(1)) {
            return Ok(());
        }
        let mut files: Vec<String> = self.loaded.keys().map(|f| f.display().to_string()).collect();
        files.sort();
        bail!(
            "{}: config field `num_hidden_layers` = {}, but the weight files ({}) hold {}; fix num_hidden_layers or \
             the weights",
            cfg_file.display(),
            self.shape.layers,
            files.join(", "),
            top.map_or("no layer".to_string(), |t| format!("layers 0..={t} only"))
        );
    }

    /// Every tensor the config implies is in the weights with the shape it implies, checked
    /// from the files' headers before the model they would fill is allocated (a `vocab_size`
    /// of 10^9 beside a tiny file is refused here, not by an allocation of 64 GB).
    fn check_shapes(&self) -> Result<()> {
        for name in expected_names(&self.shape) {
            let want = self.shape.shape_of(&name)?;
            let file = self.files.get(&name).with_context(|| {
                format!(
                    "{}: the weights have no tensor {name}, which config.json implies (shape {want:?})",
                    self.dir.display()
                )
            })?;
            let st = parse(&self.loaded[file], file)?;
            let got =
                st.tensor(&name).with_context(|| format!("{}: no tensor {name}", file.display()))?.shape().to_vec();
            if got != want {
                bail!("{}: {name} has shape {got:?}, but config.json implies {want:?}", file.display());
            }
        }
        Ok(())
    }

    /// Refuses tensors the config does not account for (they would be dropped): layers past
    /// `num_hidden_layers`, an `lm_head.weight` of a tied model that differs from the
    /// embedding, anything else a Llama does not hold. RoPE's `inv_freq` buffers are derived
    /// from `rope_theta` and ignored.
    fn refuse_unaccounted(&mut self) -> Result<()> {
        let mut extra: Vec<&String> = self
            .files
            .keys()
            .filter(|n| !is_expected(&self.shape, n) && !n.ends_with(".rotary_emb.inv_freq"))
            .filter(|n| !(self.shape.tied && *n == "lm_head.weight"))
            .collect();
        extra.sort();
        if !extra.is_empty() {
            let dir = self.dir.join("");
            let listed: Vec<String> = extra
                .iter()
                .take(LISTED)
                .map(|n| {
                    let f = &self.files[*n];
                    format!("{n} (in {})", f.strip_prefix(&dir).unwrap_or(f).display())
                })
                .collect();
            let more = match extra.len().saturating_sub(LISTED) {
                0 => String::new(),
                k => format!(" and {k} more"),
            };
            let s = &self.shape;
            bail!(
                "{}: {} tensor(s) in the weights are not accounted for by config.json (num_hidden_layers = {}, \
                 tie_word_embeddings = {}), so the import would drop them: {}{more}; fix config.json or the weights",
                self.dir.display(),
                extra.len(),
                s.layers,
                s.tied,
                listed.join(", ")
            );
        }
        if self.shape.tied && self.files.contains_key("lm_head.weight") {
            let shape = [self.shape.vocab, self.shape.d];
            if self.tensor("lm_head.weight", &shape)? != self.tensor("model.embed_tokens.weight", &shape)? {
                bail!(
                    "{}: config.json sets `tie_word_embeddings` = true, but lm_head.weight differs from \
                     model.embed_tokens.weight, so the import would drop it; fix config.json or the weights",
                    self.dir.display()
                );
            }
        }
        Ok(())
    }

    /// Tensor `name` as f32, row-major, checked to have `shape` and to be finite.
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let file = self.files.get(name).with_context(|| format!("{}: no tensor {name}", self.dir.display()))?.clone();
        if !self.loaded.contains_key(&file) {
            self.loaded.insert(file.clone(), map(&file)?);
        }
        let st = parse(&self.loaded[&file], &file)?;
        let t = st.tensor(name).with_context(|| format!("{}: no tensor {name}", file.display()))?;
        if t.shape() != shape {
            bail!("{}: {name} has shape {:?}, but config.json implies {shape:?}", file.display(), t.shape());
        }
        let b = t.data();
        let values: Vec<f32> = match t.dtype() {
            Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            other => bail!("{}: {name} is {other:?}; import reads f32, bf16 and f16", file.display()),
        };
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            bail!(
                "{}: tensor {name} holds {} at index {:?} (element {i} of {}); import refuses weights that are not finite",
                file.display(),
                values[i],
                coords(i, shape),
                values.len()
            );
        }
        Ok(values)
    }
}
