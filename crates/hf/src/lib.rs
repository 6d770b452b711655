//! Hugging Face interchange: [`export`] writes a checkpoint as a folder transformers loads
//! (a `LlamaForCausalLM`, or the custom code of a low-rank model); [`import`] reads a Llama
//! folder as a checkpoint of any architecture, low-rank projections from the truncated SVD
//! of their dense weights.
//!
//! User guide: `docs/guide/huggingface.md`.

pub mod export;
pub mod import;
