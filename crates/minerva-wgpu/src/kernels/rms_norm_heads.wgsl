// In place, each head of each row: x[r, h, :] = x[r, h, :] / sqrt(mean(x[r, h, :]²) + eps) * g.
// One workgroup per (row, head): workgroup_id.x is the row, .y the head.

struct Params {
    n_heads: u32,
    head_dim: u32,
    eps: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> partial: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = (wid.x * p.n_heads + wid.y) * p.head_dim;
    var s = 0.0;
    for (var c = lid.x; c < p.head_dim; c += 64u) {
        s += x[o + c] * x[o + c];
    }
    partial[lid.x] = s;
    for (var k = 32u; k > 0u; k >>= 1u) {
        workgroupBarrier();
        if (lid.x < k) {
            partial[lid.x] += partial[lid.x + k];
        }
    }
    workgroupBarrier();
    let scale = 1.0 / sqrt(partial[0] / f32(p.head_dim) + p.eps);
    for (var c = lid.x; c < p.head_dim; c += 64u) {
        x[o + c] = x[o + c] * scale * g[c];
    }
}
