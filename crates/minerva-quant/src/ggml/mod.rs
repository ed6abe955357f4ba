//! GGML block formats, one module per family. Each module holds the `#[repr(C)]` block structs
//! (with their byte diagrams), the scalar reference dequantizers named as ggml names them, and the
//! reference quantizers this crate implements.

pub mod k_quantize;
pub mod k_quants;
pub mod mxfp4;
pub mod q4;
pub mod q5;
pub mod q8;
