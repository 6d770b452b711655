//! Per-kernel time of training steps of a model shape (diagnosis):
//! `cargo run --release -p boost-train --example profile_step -- cola-60m cola 8192 [steps]
//! [threads] [balance|hold]` (2 threads by default). Steps run as the trainer's do, in the
//! pool with its workers held awake. With `balance` they alternate between GEMM panels sized
//! by core speed and equal panels; with `hold`, between the held pool and a plain
//! `rayon::scope`; the medians of the pairs' ratios (B over A) of step time and GEMM time are
//! printed as well. Each step's line also gives its minor page faults (first touches of newly
//! mapped memory: on cola-60m, 0 a step from the third step on, as the buffers are reused).

use boost_config::Config;
use boost_exec::optim::{AdamW, clip_coef, grad_norm};
use boost_model::{Batch, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use boost_tensor::profile::Profiled;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (preset, arch, vocab) =
        (a.get(1).map_or("cola-60m", |s| s), a.get(2).map_or("cola", |s| s), a.get(3).map_or("8192", |s| s));
    let steps: usize = a.get(4).map_or(3, |s| s.parse().unwrap());
    let threads: usize = a.get(5).map_or(2, |s| s.parse().unwrap());
    // An A/B of two ways to run the step, alternated step by step: `balance` (GEMM panels
    // by core speed, then equal) or `hold` (the pool held awake, then a plain `rayon::scope`).
    let alternate = a.get(6).map(String::as_str);
    let (a_name, b_name) = match alternate {
        Some("balance") => ("panels by speed", "equal panels"),
        Some("hold") => ("pool held awake", "plain rayon::scope"),
        Some(other) => panic!("unknown A/B `{other}`: balance or hold"),
        None => ("", ""),
    };
    let cfg = Config::load(
        None,
        &[format!("model.preset={preset}"), format!("model.arch={arch}"), format!("model.vocab={vocab}")],
    )
    .unwrap();
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().unwrap();
    let (b, s) = (8, 256);
    let mut m = Model::new(Profiled::new(Cpu::<f32>::new()), &cfg.model, Layout::single(&cfg.model), 1).unwrap();
    let mut opt = AdamW::new(m.be(), m.store());
    let ids: Vec<u32> = (0..b * s + 1).map(|i| ((i as u64 * 2654435761) % cfg.model.vocab as u64) as u32).collect();
    let batch = Batch { ids: &ids[..b * s], targets: &ids[1..], batch: b, seq: s };
    let tc = boost_config::TrainConfig::default();
    // (step seconds, GEMM seconds) of the A steps and the B steps.
    let (mut a_steps, mut b_steps) = (Vec::new(), Vec::new());
    for i in 0..steps + 1 {
        if i == 1 {
            m.be().take();
            m.be().take_detail();
        }
        let is_b = alternate.is_some() && i % 2 == 1;
        boost_tensor::cpu::core_speed::set_enabled(!(is_b && alternate == Some("balance")));
        let gemm_before = m.be().peek().gemm;
        let faults_before = minor_faults();
        let t = Instant::now();
        let mut step = || {
            m.zero_grads();
            m.forward_backward(&Solo, &batch, 1.0 / (b * s) as f64);
            let n = grad_norm(m.be(), m.store(), 0, &Solo);
            let (be, store) = m.be_and_store_mut();
            opt.update(be, store, &tc, 1e-4, clip_coef(n, 1.0));
        };
        if is_b && alternate == Some("hold") {
            rayon::scope(move |_| step())
        } else {
            boost_tensor::cpu::pool::hold_pool(step)
        }
        let (dt, gemm) = (t.elapsed().as_secs_f64(), (m.be().peek().gemm - gemm_before).as_secs_f64());
        let label =
            if alternate.is_none() { String::new() } else { format!(" ({})", if is_b { b_name } else { a_name }) };
        eprintln!("step {i}: {dt:.3} s{label}, {} page faults", minor_faults() - faults_before);
        if i > 0 {
            if is_b { b_steps.push((dt, gemm)) } else { a_steps.push((dt, gemm)) }
        }
    }
    if alternate.is_some() {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let pairs = a_steps.len().min(b_steps.len());
        let ratio = |f: fn(&(f64, f64)) -> f64| median((0..pairs).map(|j| f(&b_steps[j]) / f(&a_steps[j])).collect());
        println!(
            "{b_name} over {a_name}, medians of {pairs} pairs: step {:.3}×, GEMM {:.3}×",
            ratio(|x| x.0),
            ratio(|x| x.1)
        );
    }
    let mut d = m.be().take_detail();
    d.sort_by_key(|x| std::cmp::Reverse(x.1));
    for (name, t, n) in d {
        println!("{name:>18}: {:7.1} ms/step  ({} calls/step)", t.as_secs_f64() * 1e3 / steps as f64, n / steps as u64);
    }
}

/// Minor page faults of this process so far (first touches of freshly mapped memory).
fn minor_faults() -> i64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u.ru_minflt
}
