// Rotates pairs of every head of every row in place by a (cos, sin) table computed on the host
// (`cs[row * half + i]`, the same f32 values the CPU backend uses). Normal style pairs (2i, 2i+1),
// NeoX style (i, i + dim/2). One thread per (row, head, pair).

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

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x + gid.y * 65535u * 64u;
    let per_row = p.n_heads * p.half;
    if (idx >= p.rows * per_row) {
        return;
    }
    let r = idx / per_row;
    let h = (idx % per_row) / p.half;
    let i = idx % p.half;
    var a = 2u * i;
    var b = 2u * i + 1u;
    if (p.neox != 0u) {
        a = i;
        b = i + p.half;
    }
    let base = (r * p.n_heads + h) * p.head_dim;
    let c = cs[r * p.half + i];
    let x0 = x[base + a];
    let x1 = x[base + b];
    x[base + a] = x0 * c.x - x1 * c.y;
    x[base + b] = x0 * c.y + x1 * c.x;
}
