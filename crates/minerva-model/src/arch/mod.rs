//! Architecture graphs: each reads like its reference implementation and calls only backend ops.

pub mod llama;
