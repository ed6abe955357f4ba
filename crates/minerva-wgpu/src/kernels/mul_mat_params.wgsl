// The parameters and bindings shared by the matrix kernels (mul_mat, mul_mat_vec, mul_mat_tiled),
// which bind the activations at 1 in their own type; `params` in mul_mat.rs fills them.

struct Params {
    cols: u32,
    rows: u32,
    n_tok: u32,
    row_bytes: u32,
    y_offset: u32,   // first output column of this chunk
    y_stride: u32,   // output columns (all chunks)
    groups_x: u32,   // workgroups along x (rows may exceed the 65535 per-dimension limit)
    aux: u32,        // the deferred norm's eps (f32 bits) in mul_mat_vec_input_rms_norm.wgsl
}

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
