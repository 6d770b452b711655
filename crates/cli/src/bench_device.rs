//! `boost bench --device cuda`: the bench's models on the CUDA backend (boost-bench's
//! `device`), a GPU with the `cuda` feature or the kernel emulator with `emulate`; a build with
//! neither refuses, naming the feature.

use crate::bench::BenchArgs;
use anyhow::{Result, bail};
use boost_bench::BenchOptions;

pub fn run(a: &BenchArgs, opts: &BenchOptions) -> Result<()> {
    let device =
        boost_config::parse_device(&a.device).map_err(|e| anyhow::anyhow!("--device {}: {}", a.device, e.message))?;
    if device == boost_config::Device::Cpu {
        bail!("--cuda-graphs: CUDA graphs are the CUDA backend's; add --device cuda");
    }
    for (on, flag) in [(a.tp.is_some(), "--tp"), (a.grid.is_some(), "--grid"), (a.gemm_shapes, "--gemm-shapes")] {
        if on {
            bail!("{flag} runs on the CPU engine only; leave it out with --device {}", a.device);
        }
    }
    run_on(a, opts)
}

#[cfg(not(any(feature = "cuda", feature = "emulate")))]
fn run_on(a: &BenchArgs, _: &BenchOptions) -> Result<()> {
    bail!(
        "--device {}: this build of boost has no CUDA backend; build it with --features cuda (an NVIDIA GPU) or \
         --features emulate (the CPU emulator of the kernels, whose times are not GPU times)",
        a.device
    )
}

#[cfg(any(feature = "cuda", feature = "emulate"))]
fn run_on(a: &BenchArgs, opts: &BenchOptions) -> Result<()> {
    use boost_config::Config;
    let mut configs = Vec::new();
    for arch in &a.arch {
        let mut sets = vec![
            format!("model.preset={}", a.model),
            format!("model.arch={arch}"),
            format!("model.vocab={}", a.vocab),
            format!("train.seq_len={}", a.seq),
            format!("train.micro_batch={}", a.micro_batch),
        ];
        sets.extend(a.sets.iter().cloned());
        // The flags that name the device and its graphs win over --set.
        sets.push(format!("train.device={}", a.device));
        if a.cuda_graphs {
            sets.push("train.cuda_graphs=true".into());
        }
        configs.push(Config::load(None, &sets)?);
    }
    let dev =
        boost_bench::device::DeviceOptions { configs, threads: opts.threads, warmup: opts.warmup, rounds: opts.rounds };
    let report = boost_bench::device::run(&dev, &|s| eprintln!("{s}"))?;
    if let Some(path) = &a.record {
        let mut command: Vec<String> = std::env::args().collect();
        if let Some(first) = command.first_mut() {
            *first = "boost".into();
        }
        boost_bench::record::write(path, &boost_bench::record::device_record(&command, &report)?)?;
        eprintln!("record written to {}", path.display());
    }
    crate::bench::print_report(a.json, &report, || boost_bench::launches::table(&report))
}
