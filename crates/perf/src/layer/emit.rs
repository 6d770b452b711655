//! The op constructors every piece of the layer goes through: GEMMs (with their backward
//! pair), elementwise kernels by bytes moved, and tensor-parallel collectives.

use super::ctx::LayerEmitter;
use crate::ops::{CollGroup, CollKind, Collective, CostOp, Elementwise, Gemm, GemmRole, Phase};

impl LayerEmitter<'_> {
    /// A GEMM `(m×k)·(k×n)`, `batch` times; `shape` = (m, k, n, batch).
    fn gemm(&mut self, label: String, role: GemmRole, shape: (u64, u64, u64, u64), redundant: bool) {
        let (m, k, n, batch) = shape;
        self.ops.push(CostOp::Gemm(Gemm {
            label,
            phase: self.phase,
            role,
            m,
            n,
            k,
            batch,
            dtype_bytes: self.a,
            redundant,
        }));
    }

    /// Forward GEMM `(T×k)·(k×n)`; in backward the data and weight gradients.
    pub(super) fn linear(&mut self, label: String, k: u64, n: u64, batch: u64, redundant: bool) {
        let t = self.t;
        match self.phase {
            Phase::Backward => {
                self.gemm(label.clone(), GemmRole::BackwardData, (t, n, k, batch), redundant);
                self.gemm(label, GemmRole::BackwardWeight, (k, t, n, batch), redundant);
            }
            _ => self.gemm(label, GemmRole::Forward, (t, k, n, batch), redundant),
        }
    }

    /// An elementwise kernel reading and writing the given elements per token
    /// (activation dtype) plus fp32 elements per token.
    pub(super) fn ew(&mut self, label: String, read: u64, write: u64, f32_elems: u64) {
        let bytes = ((read + write) * self.a + 4 * f32_elems) as f64 * self.t as f64;
        if bytes > 0.0 {
            self.ops.push(CostOp::Elementwise(Elementwise { label, phase: self.phase, bytes }));
        }
    }

    /// The backward sum of the input gradients of `n` projections sharing an input of width
    /// `w`: `n − 1` additions.
    pub(super) fn grad_sum(&mut self, label: String, n: u64, w: u64) {
        self.ew(label, (n - 1) * 2 * w, (n - 1) * w, 0);
    }

    /// A TP collective; backward labels get the suffix `.bwd`.
    pub(super) fn coll(&mut self, label: String, kind: CollKind, per_token: u64, f32_per_token: u64) {
        if !self.tp_comm() {
            return;
        }
        let t = self.t;
        let label = if self.phase == Phase::Backward { format!("{label}.bwd") } else { label };
        self.ops.push(CostOp::Collective(Collective {
            label,
            phase: self.phase,
            kind,
            group: CollGroup::Tp,
            elements: (per_token + f32_per_token) * t,
            elements_f32: f32_per_token * t,
            dtype_bytes: self.a,
        }));
    }
}
