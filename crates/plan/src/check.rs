//! Resolving a declaration: the placement rules, applied to every factor, with a refusal
//! for each way a plan can be wrong.

use super::*;

/// The placement of `x·W` before any sum, or `None` when `x` and `W` do not fit.
pub(super) fn product(input: Placement, shard: Shard) -> Option<Placement> {
    match (input, shard) {
        (Placement::Replicated, Shard::Whole) => Some(Placement::Replicated),
        (Placement::Replicated, Shard::Output) => Some(Placement::Sharded),
        (Placement::Sharded, Shard::Input) => Some(Placement::Partial),
        _ => None,
    }
}

/// The placement after the factor and its declared sum (for a plan already resolved).
pub(super) fn after(input: Placement, shard: Shard, summed: bool) -> Placement {
    match product(input, shard) {
        Some(Placement::Partial) if summed => Placement::Replicated,
        Some(p) => p,
        None => unreachable!("a resolved plan's factors fit their inputs"),
    }
}

fn factor(scheme: Scheme, what: &str, input: Placement, l: Linear) -> Result<(FactorPlan, Placement), String> {
    let name = scheme.name();
    let out = product(input, l.shard).ok_or_else(|| {
        format!("the {name} plan applies a {:?}-split {what} to a {input:?} input, which does not fit", l.shard)
    })?;
    let out = match (out, l.sum_output) {
        (Placement::Partial, true) => Placement::Replicated,
        (Placement::Partial, false) => {
            return Err(format!("the {name} plan leaves the Partial output of {what} unsummed"));
        }
        (p, true) => return Err(format!("the {name} plan sums the output of {what}, which is {p:?}, not Partial")),
        (p, false) => p,
    };
    let sum_input_grad = input == Placement::Replicated && l.shard == Shard::Output;
    Ok((FactorPlan { shard: l.shard, sum_output: l.sum_output, sum_input_grad }, out))
}

fn group(
    decl: &SchemeDecl,
    which: &str,
    input: Placement,
    expect: Placement,
    dense: Option<Linear>,
) -> Result<GroupPlan, String> {
    let s = decl.scheme;
    let (first, second, output) = match (decl.factors, dense) {
        (_, Some(w)) => {
            let (f, out) = factor(s, &format!("the {which} weight"), input, w)?;
            (f, None, out)
        }
        (Factors::LowRank { a, b }, None) => {
            let (fa, latent) = factor(s, &format!("the {which} A"), input, a)?;
            let (fb, out) = factor(s, &format!("the {which} B"), latent, b)?;
            (fa, Some(fb), out)
        }
        (Factors::Dense { .. }, None) => unreachable!("dense factors are passed in"),
    };
    if output != expect {
        return Err(format!(
            "the {} plan's {which} projections produce a {output:?} output where {expect:?} is declared",
            s.name()
        ));
    }
    Ok(GroupPlan { input, first, second, output })
}

pub(super) fn resolve(decl: SchemeDecl, arch: Arch, norm: NormMode, tied: bool, tp: usize) -> Result<Plan, String> {
    let name = decl.scheme.name();
    let dense = matches!(decl.factors, Factors::Dense { .. });
    if dense == arch.is_low_rank() {
        return Err(if dense {
            format!(
                "{name} shards dense weights, but model.arch = {}; use \"vanilla\" or \"btp\" for low-rank models",
                arch.name()
            )
        } else {
            format!("{name} shards low-rank factors, but model.arch = full; use \"megatron\"")
        });
    }
    let (into_w, out_w) = match decl.factors {
        Factors::Dense { into_block, out_of_block } => (Some(into_block), Some(out_of_block)),
        Factors::LowRank { .. } => (None, None),
    };
    let into_block = group(&decl, "q/k/v and gate/up", decl.residual, decl.interior, into_w)?;
    let out_of_block = group(&decl, "o and down", decl.interior, decl.residual, out_w)?;
    let sharded = decl.residual == Placement::Sharded;
    if arch == Arch::Lax && tp > 1 && into_block.latent() == Some(Placement::Sharded) {
        return Err(format!(
            "LaX under {name} TP needs the whole latent on every rank (the gate and LN act over all of r); \
             use parallel.scheme = \"btp\" for LaX"
        ));
    }
    let norm = match (sharded, norm) {
        (false, _) => NormPlacement::Replicated,
        (true, NormMode::Sync) => NormPlacement::ShardedSync,
        (true, NormMode::Local) => {
            return Err("parallel.norm = \"local\" normalises each shard by its own statistic, a different model \
                 than RMSNorm over d: `boost plan --norm local` prices it, training uses \"online\" or \"sync\""
                .into());
        }
        (true, NormMode::Online) if into_block.first.sum_output => NormPlacement::ShardedOnline,
        (true, NormMode::Online) => {
            return Err(format!(
                "the online norm rides in the all-reduce after the first projection, which {name} does not issue; \
                 use parallel.norm = \"sync\""
            ));
        }
    };
    let entry = match (sharded, tied) {
        (true, false) => Entry::HiddenShard,
        (false, false) if tp == 1 => Entry::HiddenShard,
        (true, true) if tp > 1 => Entry::VocabReduceScatter,
        _ => Entry::VocabAllReduce,
    };
    let exit = if sharded && tp > 1 { Exit::Gather } else { Exit::Whole };
    Ok(Plan { decl, tp, into_block, out_of_block, norm, entry, exit })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Scheme; 3] = [Scheme::Megatron, Scheme::Vanilla, Scheme::Btp];

    #[test]
    fn every_declared_scheme_resolves_for_its_architectures() {
        for s in ALL {
            for arch in [Arch::Full, Arch::Svd, Arch::Cola, Arch::Lax] {
                let ok = Plan::new(s, arch, NormMode::Online, false, 4);
                let expect = match (s, arch) {
                    (Scheme::Megatron, a) => !a.is_low_rank(),
                    (Scheme::Vanilla, a) => a.is_low_rank() && a != Arch::Lax,
                    (Scheme::Btp, a) => a.is_low_rank(),
                };
                assert_eq!(ok.is_ok(), expect, "{s:?} {arch:?}: {ok:?}");
            }
        }
    }

    #[test]
    fn backward_sums_follow_from_the_placements() {
        let p = Plan::new(Scheme::Btp, Arch::Cola, NormMode::Online, false, 2).unwrap();
        assert!(p.into_block.first.sum_output && !p.into_block.first.sum_input_grad);
        let b = p.into_block.second.unwrap();
        assert!(!b.sum_output && b.sum_input_grad);
        let v = Plan::new(Scheme::Vanilla, Arch::Cola, NormMode::Online, false, 2).unwrap();
        assert!(v.into_block.first.sum_input_grad && v.out_of_block.first.sum_input_grad);
        assert!(v.into_block.second.unwrap().sum_output);
        let m = Plan::new(Scheme::Megatron, Arch::Full, NormMode::Online, false, 2).unwrap();
        assert!(m.into_block.first.sum_input_grad && !m.into_block.first.sum_output);
        assert!(m.out_of_block.first.sum_output && !m.out_of_block.first.sum_input_grad);
    }

    #[test]
    fn a_plan_that_leaves_a_partial_unsummed_is_refused_when_built() {
        let mut d = btp::DECL;
        d.factors = Factors::LowRank { a: Linear { shard: Shard::Input, sum_output: false }, b: Linear::COLUMN };
        let e = resolve(d, Arch::Cola, NormMode::Sync, false, 2).unwrap_err();
        assert!(e.contains("leaves the Partial output") && e.contains("A"), "{e}");
    }

    #[test]
    fn mismatched_placements_and_wasted_sums_are_refused() {
        let mut d = vanilla::DECL;
        d.interior = Placement::Sharded;
        let e = resolve(d, Arch::Cola, NormMode::Online, false, 2).unwrap_err();
        assert!(e.contains("produce a Replicated output where Sharded"), "{e}");
        let mut d = megatron::DECL;
        d.factors =
            Factors::Dense { into_block: Linear::COLUMN, out_of_block: Linear { sum_output: true, ..Linear::COLUMN } };
        let e = resolve(d, Arch::Full, NormMode::Online, false, 2).unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        let mut d = megatron::DECL;
        d.factors = Factors::Dense {
            into_block: Linear { sum_output: true, ..Linear::COLUMN },
            out_of_block: Linear::ROW_SUMMED,
        };
        let e = resolve(d, Arch::Full, NormMode::Online, false, 2).unwrap_err();
        assert!(e.contains("which is Sharded, not Partial"), "{e}");
    }

    #[test]
    fn the_norm_is_sharded_only_with_the_residual() {
        let n = |s, arch, mode| Plan::new(s, arch, mode, false, 2).unwrap().norm;
        assert_eq!(n(Scheme::Btp, Arch::Svd, NormMode::Online), NormPlacement::ShardedOnline);
        assert_eq!(n(Scheme::Btp, Arch::Svd, NormMode::Sync), NormPlacement::ShardedSync);
        assert_eq!(n(Scheme::Vanilla, Arch::Svd, NormMode::Sync), NormPlacement::Replicated);
        assert_eq!(n(Scheme::Megatron, Arch::Full, NormMode::Sync), NormPlacement::Replicated);
    }

    #[test]
    fn the_per_shard_norm_is_priced_but_never_planned_for_training() {
        // A whole residual ignores the norm mode; a sharded one cannot run the approximation.
        let p = Plan::new(Scheme::Vanilla, Arch::Svd, NormMode::Local, false, 2).unwrap();
        assert_eq!(p.norm, NormPlacement::Replicated);
        let e = Plan::new(Scheme::Btp, Arch::Svd, NormMode::Local, false, 2).unwrap_err();
        assert!(e.contains("parallel.norm = \"local\"") && e.contains("boost plan --norm local"), "{e}");
        assert_eq!(NormMode::parse("sync"), Ok(NormMode::Sync));
        assert!(NormMode::parse("per-shard").unwrap_err().contains("online, sync or local"));
    }

    #[test]
    fn entry_and_exit_follow_the_residual_and_tying() {
        let b = |tied, tp| Plan::new(Scheme::Btp, Arch::Cola, NormMode::Online, tied, tp).unwrap();
        assert_eq!((b(false, 2).entry, b(false, 2).exit), (Entry::HiddenShard, Exit::Gather));
        assert_eq!((b(true, 2).entry, b(true, 1).entry), (Entry::VocabReduceScatter, Entry::VocabAllReduce));
        assert_eq!(b(false, 1).exit, Exit::Whole);
        let m = |tied, tp| Plan::new(Scheme::Megatron, Arch::Full, NormMode::Online, tied, tp).unwrap();
        assert_eq!((m(false, 1).entry, m(false, 2).entry), (Entry::HiddenShard, Entry::VocabAllReduce));
        assert_eq!(m(true, 2).exit, Exit::Whole);
    }
}
