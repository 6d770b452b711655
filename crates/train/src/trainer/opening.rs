//! A run's opening lines: the banner naming the model, the grid and the data, and the
//! progress bar.

use super::TrainOptions;
use anyhow::Result;
use boost_config::Config;
use boost_data::Dataset;
use boost_model::Layout;
use indicatif::{ProgressBar, ProgressStyle};

/// The opening line: the model, its size, the grid it runs on and the data.
pub(super) fn banner(cfg: &Config, data: &Dataset, layout: &Layout, world: usize) -> Result<String> {
    let layout_desc = if world > 1 {
        let p = &cfg.parallel;
        format!(
            ", grid dp={} pp={} tp={} ({:?}{})",
            p.dp,
            p.pp,
            p.tp,
            layout.scheme,
            if p.zero == 1 { ", ZeRO-1" } else { "" }
        )
        .to_lowercase()
    } else {
        String::new()
    };
    Ok(format!(
        "model: {} {} (d={}, layers={}, rank={}, vocab={}), {:.2}M parameters{layout_desc}; data: {} train / {} val tokens",
        cfg.model.preset,
        cfg.model.arch.name(),
        cfg.model.d,
        cfg.model.layers,
        cfg.model.rank,
        cfg.model.vocab,
        boost_model::layout_pieces(&cfg.model, Layout::single(&cfg.model))?
            .iter()
            .map(|p| p.shape.iter().product::<usize>())
            .sum::<usize>() as f64
            / 1e6,
        data.train.len(),
        data.val.len()
    ) + &mix_desc(data))
}

/// The blend of `data.mix`, after the first dataset's sizes in the banner.
fn mix_desc(data: &boost_data::Dataset) -> String {
    if data.mix.is_empty() {
        return String::new();
    }
    let total: f64 = data.mix.iter().map(|p| p.weight).sum();
    let parts: Vec<String> = data
        .mix
        .iter()
        .map(|p| format!("{} {:.0}% ({} train tokens)", p.name, 100.0 * p.weight / total, p.train.len()))
        .collect();
    format!(" (the first of data.mix: {})", parts.join(", "))
}

pub(super) fn progress(opts: &TrainOptions, steps: u64, at: u64) -> ProgressBar {
    if opts.quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed_precise} < {eta_precise}]")
            .expect("valid template"),
    );
    bar.set_position(at);
    bar
}
