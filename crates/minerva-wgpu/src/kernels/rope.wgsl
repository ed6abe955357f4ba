// Rotates pairs of every head of every row in place (rope_pair.wgsl) by a (cos, sin) table
// computed on the host. One thread per (row, head, pair).

struct Params {
    rows: u32,
    n_heads: u32,
    head_dim: u32,
    half: u32,
    neox: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> rope_x: array<f32>;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    rotate_pair(gid.x + gid.y * 65535u * 64u, p.rows, p.n_heads, p.head_dim, p.half, p.neox != 0u);
}
