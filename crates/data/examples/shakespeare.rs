//! Fetches and builds the shakespeare demo dataset with the default `[data]` settings, then
//! prints what was built. Usage: `cargo run --release -p boost-data --example shakespeare [DIR]`.

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut cfg = boost_config::DataConfig::default();
    if let Some(dir) = std::env::args().nth(1) {
        cfg.dir = dir;
    }
    let t0 = Instant::now();
    let ds = boost_data::prepare(&cfg)?;
    let secs = t0.elapsed().as_secs_f64();
    println!("{}", serde_json::to_string_pretty(&ds.meta)?);
    let train = ds.train_loader(256, cfg.seed)?;
    let val = ds.val_loader(256)?;
    println!("windows of 256 tokens: {} train, {} validation; prepared in {secs:.1} s", train.windows(), val.windows());
    let mut x = vec![0u32; 256];
    let mut y = vec![0u32; 256];
    train.fill(0, 1, &mut x, &mut y);
    println!("first training sequence:\n{}", ds.tokenizer.as_ref().unwrap().decode(&x));
    Ok(())
}
