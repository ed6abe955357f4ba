// The parameters and bindings shared by the prefill expert kernels (mul_mat_id_grouped,
// mul_mat_id_tiled), which bind the activations at 1 in their own type.

struct Params {
    cols: u32,
    rows: u32,          // rows per expert
    n_pairs: u32,
    row_bytes: u32,
    y_stride: u32,      // = rows
    groups_x: u32,
    expert_first: u32,  // first expert in this chunk
    x_div: u32,
    groups_t: u32,      // mul_mat_id_tiled: groups of a tile's BN pairs per expert (z = expert_in_chunk · groups_t + j)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
