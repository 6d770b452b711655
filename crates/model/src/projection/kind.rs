//! The four projection groups of a decoder layer and what each is.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjKind {
    Qkv = 0,
    O = 1,
    GateUp = 2,
    Down = 3,
}

impl ProjKind {
    pub const ALL: [ProjKind; 4] = [ProjKind::Qkv, ProjKind::O, ProjKind::GateUp, ProjKind::Down];
    pub fn comps(self) -> &'static [&'static str] {
        match self {
            ProjKind::Qkv => &["q_proj", "k_proj", "v_proj"],
            ProjKind::O => &["o_proj"],
            ProjKind::GateUp => &["gate_proj", "up_proj"],
            ProjKind::Down => &["down_proj"],
        }
    }
    pub fn module(self) -> &'static str {
        match self {
            ProjKind::Qkv | ProjKind::O => "self_attn",
            _ => "mlp",
        }
    }
    /// The group reads the residual stream (through a norm) rather than writing it.
    pub fn reads_residual(self) -> bool {
        matches!(self, ProjKind::Qkv | ProjKind::GateUp)
    }
    /// The RMSNorm in front of the group, if any.
    pub fn norm_name(self) -> Option<&'static str> {
        match self {
            ProjKind::Qkv => Some("input_layernorm"),
            ProjKind::GateUp => Some("post_attention_layernorm"),
            _ => None,
        }
    }
}
