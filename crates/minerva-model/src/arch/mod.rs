//! Architecture graphs: each reads like its reference implementation and calls only backend ops.

pub mod gpt_oss;
mod gpt_oss_weights;
pub mod llama;
