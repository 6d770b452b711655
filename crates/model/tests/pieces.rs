//! Which slices of the canonical tensors a rank holds comes from the plan alone: the
//! allocation-free declaration checkpoints read equals a built model's, for every scheme,
//! degree, rank and pipeline stage.

use boost_config::{Config, NormMode, Scheme};
use boost_model::{Layout, Model, layout_pieces};
use boost_tensor::cpu::Cpu;

#[test]
fn layout_pieces_equal_a_built_models_pieces() {
    let cases: [(&str, &[Scheme]); 4] = [
        ("full", &[Scheme::Megatron]),
        ("svd", &[Scheme::Vanilla, Scheme::Btp]),
        ("cola", &[Scheme::Vanilla, Scheme::Btp]),
        ("lax", &[Scheme::Btp]),
    ];
    let mut checked = 0;
    for (arch, schemes) in cases {
        for tied in [false, true] {
            let sets = [
                format!("model.arch={arch}"),
                format!("model.tie_embeddings={tied}"),
                "model.d=32".into(),
                "model.d_ff=48".into(),
                "model.heads=4".into(),
                "model.rank=8".into(),
                "model.vocab=61".into(),
                "model.layers=4".into(),
            ];
            let cfg = Config::load(None, &sets).unwrap().model;
            for &scheme in schemes {
                for tp in [1, 2, 4] {
                    for stages in [1, 2] {
                        for stage in 0..stages {
                            for tp_rank in 0..tp {
                                let layout = Layout {
                                    scheme,
                                    tp,
                                    tp_rank,
                                    norm: NormMode::Online,
                                    grouping: true,
                                    stage,
                                    stages,
                                };
                                let built =
                                    Model::declare(Cpu::<f32>::new(), &cfg, layout).unwrap().store().pieces().to_vec();
                                assert!(!built.is_empty());
                                assert_eq!(layout_pieces(&cfg, layout).unwrap(), built, "{arch} {scheme:?} {layout:?}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    // tied × (arch, scheme) pairs × ranks over tp ∈ {1, 2, 4} × stages over pp ∈ {1, 2}.
    assert_eq!(checked, 2 * 6 * (1 + 2 + 4) * 3);
}
