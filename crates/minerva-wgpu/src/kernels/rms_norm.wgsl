// out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * g. One workgroup of 256 threads per row:
// a decode step's norm is one row, and its loads need many threads in flight.

struct Params {
    cols: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = wid.x * p.cols;
    var s = 0.0;
    for (var c = lid.x; c < p.cols; c += 256u) {
        s += x[o + c] * x[o + c];
    }
    partial[lid.x] = s;
    for (var k = 128u; k > 0u; k >>= 1u) {
        workgroupBarrier();
        if (lid.x < k) {
            partial[lid.x] += partial[lid.x + k];
        }
    }
    workgroupBarrier();
    let scale = 1.0 / sqrt(partial[0] / f32(p.cols) + p.eps);
    for (var c = lid.x; c < p.cols; c += 256u) {
        out[o + c] = x[o + c] * scale * g[c];
    }
}
