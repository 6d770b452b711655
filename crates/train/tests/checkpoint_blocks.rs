//! Sharded checkpoints move tensors in blocks of rows (at most `BLOCK` elements), so a save
//! or a load holds one block, not a tensor. Here the embedding and head tables (10000×256,
//! 2.4 blocks whole, 1.2 per tensor-parallel half or ZeRO-1 chunk) make every path cut a
//! tensor into several blocks: one rank's checkpoint loads into a tp2·pp2 grid and into dp2
//! ZeRO-1 replicas element for element, and their own checkpoints load back into one rank
//! equal to the original, bit for bit (these are copies, so the tolerance is zero).

use boost_checkpoint::grid::load_run;
use boost_checkpoint::owned_part::OwnedPart;
use boost_checkpoint::shard::BLOCK;
use boost_checkpoint::{self as checkpoint, Checkpoint, CheckpointMeta, Tensors, WriterGrid, local_slice};
use boost_config::Config;
use boost_exec::dp::Optimizer;
use boost_model::{Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, MatMut, Solo};
use std::path::Path;

type Be = Cpu<f32>;

fn config(sets: &[&str]) -> Config {
    let mut v: Vec<String> = [
        "model.arch=cola",
        "model.d=256",
        "model.d_ff=512",
        "model.heads=4",
        "model.rank=64",
        "model.layers=2",
        "model.vocab=10000",
        "model.tie_embeddings=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(sets.iter().map(|s| s.to_string()));
    Config::load(None, &v).unwrap()
}

fn meta(cfg: &Config) -> CheckpointMeta {
    CheckpointMeta::outside_training(checkpoint::SHARDED_FORMAT, 1, cfg)
}

/// Write this rank's part, every fetch checked to ask for at most one block.
fn write_part(root: &Path, model: &Model<Be>, opt: &Optimizer<Be>, dp: usize) {
    let part = OwnedPart::of(model, opt, dp);
    let tmp = checkpoint::begin(root, 1).unwrap();
    let name = checkpoint::sidecar_name(model.layout().stage, model.layout().tp_rank, dp);
    let mut largest = 0;
    let mut fetch = |f: usize, i: usize, rows: std::ops::Range<usize>| {
        let block = part.read(model, opt, (f, i), rows);
        largest = largest.max(block.len());
        block
    };
    checkpoint::write_part(&tmp, &part.files, &name, &[("format", "2".into())], &mut fetch).unwrap();
    assert!(largest <= BLOCK, "a fetch of {largest} elements, more than one block ({BLOCK})");
    assert!(largest > BLOCK / 2, "the test's tables span several blocks ({largest})");
}

/// The whole canonical tensors a one-rank model holds.
fn whole(model: &Model<Be>, opt: &Optimizer<Be>) -> Tensors {
    let Optimizer::Replicated(a) = opt else { panic!("one rank has no ZeRO-1") };
    checkpoint::gather(model, a, &Solo).unwrap()
}

/// Complete the checkpoint `grid` wrote under `root` with `cfg`, and load it into one rank
/// of `single`: its whole tensors.
fn complete_into_one(root: &Path, grid: WriterGrid, cfg: &Config, single: &Config) -> Tensors {
    let back = Checkpoint::open(&checkpoint::complete(root, grid, &meta(cfg), None, 0).unwrap()).unwrap();
    let mut one = Model::declare(Be::new(), &single.model, Layout::single(&single.model)).unwrap();
    let mut o1 = Optimizer::new(one.be(), one.store(), false, 1, 0);
    load_run(&back, &mut one, &mut o1).unwrap();
    whole(&one, &o1)
}

fn find<'a>(t: &'a Tensors, name: &str) -> &'a [f32] {
    &t.weights.iter().chain(&t.moments).find(|x| x.0 == name).unwrap_or_else(|| panic!("{name}")).2
}

#[test]
fn tensors_larger_than_a_block_reshard_exactly_through_blocked_saves_and_loads() {
    let root = tempfile::tempdir().unwrap();
    let single = config(&[]);
    let be = Be::new();
    let model = Model::new(be, &single.model, Layout::single(&single.model), 1).unwrap();
    let mut opt = Optimizer::new(model.be(), model.store(), false, 1, 0);
    // Moments with a distinct value in every element.
    if let Optimizer::Replicated(a) = &mut opt {
        for (i, (m, v)) in a.m.iter_mut().zip(a.v.iter_mut()).enumerate() {
            let n = m.len();
            let vals: Vec<f32> = (0..n).map(|k| (i * 7919 + k) as f32 * 1e-6).collect();
            be.write_mat(MatMut::new(m, 1, n), &vals);
            be.write_mat(MatMut::new(v, 1, n), &vals.iter().map(|x| x + 0.5).collect::<Vec<_>>());
        }
    }
    let original = whole(&model, &opt);
    let embed = original.weights.iter().find(|x| x.0 == "model.embed_tokens.weight").unwrap();
    assert!(embed.2.len() > 2 * BLOCK, "the table spans several blocks");
    let from_one = root.path().join("one");
    write_part(&from_one, &model, &opt, 0);
    let grid = WriterGrid { dp: 1, pp: 1, tp: 1, zero: false };
    let ck = Checkpoint::open(&checkpoint::complete(&from_one, grid, &meta(&single), None, 0).unwrap()).unwrap();

    // Into tp2·pp2: every piece of weights and moments equals its slice of the original.
    let tp2pp2 = config(&["parallel.tp=2", "parallel.pp=2"]);
    let from_grid = root.path().join("grid");
    let mut ranks = Vec::new();
    for (stage, tp) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let layout = Layout::staged(&tp2pp2.model, &tp2pp2.parallel, tp, stage, 2);
        let mut m = Model::declare(be, &tp2pp2.model, layout).unwrap();
        let mut o = Optimizer::new(m.be(), m.store(), false, 1, 0);
        load_run(&ck, &mut m, &mut o).unwrap();
        let Optimizer::Replicated(a) = &o else { unreachable!() };
        for p in m.store().pieces() {
            for (prefix, bufs) in [("", m.store().values()), ("m.", &a.m), ("v.", &a.v)] {
                let got: Vec<f32> = be.read_mat(p.slot.of(bufs));
                let want = local_slice(p, find(&original, &format!("{prefix}{}", p.name)));
                assert!(got == want, "{prefix}{} on pp{stage} tp{tp}", p.name);
            }
        }
        ranks.push((m, o));
    }
    // The grid's checkpoint (rank 0 completes it, last) back into one rank.
    for (m, o) in ranks.iter().rev() {
        write_part(&from_grid, m, o, 0);
    }
    let grid = WriterGrid { dp: 1, pp: 2, tp: 2, zero: false };
    assert!(complete_into_one(&from_grid, grid, &tp2pp2, &single) == original, "tp2·pp2 → one rank");

    // Into dp2 ZeRO-1: each replica's moment chunks are its range of the original buffers.
    let dp2 = config(&["parallel.dp=2", "parallel.zero=1"]);
    let from_dp = root.path().join("dp");
    let mut replicas = Vec::new();
    for r in 0..2 {
        let mut m = Model::declare(be, &dp2.model, Layout::single(&dp2.model)).unwrap();
        let mut o = Optimizer::new(m.be(), m.store(), true, 2, r);
        load_run(&ck, &mut m, &mut o).unwrap();
        let (Optimizer::Zero1(z), Optimizer::Replicated(a)) = (&o, &opt) else { unreachable!() };
        for i in 0..m.store().buf_count() {
            let own = z.owned(i, m.store().bufs()[i].len);
            for (chunk, full) in [(&z.m[i], &a.m[i]), (&z.v[i], &a.v[i])] {
                let got: Vec<f32> = be.read_mat(Mat::new(chunk, 1, own.len()));
                let want: Vec<f32> = be.read_mat(Mat::at(full, own.start, 1, own.len(), own.len()));
                assert!(got == want, "buffer {i} on replica {r}");
            }
        }
        replicas.push((m, o));
    }
    for (r, (m, o)) in replicas.iter().enumerate().rev() {
        write_part(&from_dp, m, o, r);
    }
    let grid = WriterGrid { dp: 2, pp: 1, tp: 1, zero: true };
    assert!(complete_into_one(&from_dp, grid, &dp2, &single) == original, "dp2 ZeRO-1 → one rank");
}
