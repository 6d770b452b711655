//! Names of the collectives a layer issues, as the communication recorder reports them.

use crate::projection::kind::ProjKind;

fn pick(kind: ProjKind, table: [[&'static str; 4]; 4], comp: Option<usize>) -> &'static str {
    let k = kind as usize;
    match comp {
        None => table[k][0],
        Some(j) => table[k][1 + j],
    }
}

/// Forward all-reduce of the down-projection's partial latent (BTP).
pub fn a_fwd(kind: ProjKind, comp: Option<usize>) -> &'static str {
    pick(
        kind,
        [
            ["attn.qkv.A", "attn.q.A", "attn.k.A", "attn.v.A"],
            ["attn.o.A", "attn.o.A", "", ""],
            ["mlp.gate_up.A", "mlp.gate.A", "mlp.up.A", ""],
            ["mlp.down.A", "mlp.down.A", "", ""],
        ],
        comp,
    )
}

/// Backward all-reduce of the latent gradient in front of the up-projections (BTP).
pub fn b_bwd(kind: ProjKind, comp: Option<usize>) -> &'static str {
    pick(
        kind,
        [
            ["attn.qkv.B.bwd", "attn.q.B.bwd", "attn.k.B.bwd", "attn.v.B.bwd"],
            ["attn.o.B.bwd", "attn.o.B.bwd", "", ""],
            ["mlp.gate_up.B.bwd", "mlp.gate.B.bwd", "mlp.up.B.bwd", ""],
            ["mlp.down.B.bwd", "mlp.down.B.bwd", "", ""],
        ],
        comp,
    )
}

/// Forward all-reduce of a row-parallel output (vanilla B, Megatron o/down).
pub fn out_fwd(kind: ProjKind, comp: usize) -> &'static str {
    pick(
        kind,
        [
            ["", "attn.q.B", "attn.k.B", "attn.v.B"],
            ["", "attn.o.B", "", ""],
            ["", "mlp.gate.B", "mlp.up.B", ""],
            ["", "mlp.down.B", "", ""],
        ],
        Some(comp),
    )
}

/// Backward all-reduce of the input gradient of a column-parallel first op (the `f`).
pub fn in_bwd(kind: ProjKind) -> &'static str {
    ["attn.qkv.f.bwd", "attn.o.f.bwd", "mlp.gate_up.f.bwd", "mlp.down.f.bwd"][kind as usize]
}

/// The norm statistic all-reduce (sync RMSNorm), forward and backward.
pub fn stat(kind: ProjKind, backward: bool) -> &'static str {
    match (kind, backward) {
        (ProjKind::Qkv, false) => "attn.norm.stat",
        (ProjKind::Qkv, true) => "attn.norm.stat.bwd",
        (_, false) => "mlp.norm.stat",
        (_, true) => "mlp.norm.stat.bwd",
    }
}
