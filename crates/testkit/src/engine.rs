//! The backend a suite runs on: a fresh instance for each rank and its tensor-parallel
//! collective over a boost-comm group.

use boost_comm::{CommElem, Group};
use boost_config::{Arch, LaxGate, ModelConfig};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Collective, Scalar};

/// The collective of one rank's backend over one of its groups (tp, pp or dp).
pub type TpCollective<B> = fn(&B, &Group) -> Box<dyn Collective<B>>;

pub struct Engine<B: Backend> {
    make: Box<dyn Fn() -> B + Send + Sync>,
    tp: TpCollective<B>,
}

impl<B: Backend> Engine<B> {
    pub fn new(make: impl Fn() -> B + Send + Sync + 'static, tp: TpCollective<B>) -> Self {
        Self { make: Box::new(make), tp }
    }

    pub fn backend(&self) -> B {
        (self.make)()
    }

    pub fn collective(&self, be: &B, group: &Group) -> Box<dyn Collective<B>> {
        (self.tp)(be, group)
    }
}

impl<T: Scalar + CommElem> Engine<Cpu<T>> {
    /// The CPU engine, its collectives those of the group itself.
    pub fn cpu() -> Self {
        Self::new(Cpu::<T>::new, |_, g| Box::new(g.clone()))
    }
}

/// A two-layer demo model of width `d` (d_ff = 2d, four heads, two KV heads).
pub fn small_model(arch: Arch, gate: LaxGate, d: usize, rank: usize, vocab: usize) -> ModelConfig {
    let mut c = ModelConfig::preset("demo").unwrap();
    c.arch = arch;
    c.d = d;
    c.d_ff = 2 * d;
    c.layers = 2;
    c.heads = 4;
    c.kv_heads = Some(2);
    c.rank = rank;
    c.vocab = vocab;
    c.lax.gate = gate;
    c.validate().unwrap();
    c
}
