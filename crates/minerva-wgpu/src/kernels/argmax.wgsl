// Greedy decoding: the index of each row's largest value (the first one on ties, as
// Iterator::max_by with a strict comparison). One workgroup per row.

struct Params {
    cols: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = wid.x * p.cols;
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var c = lid.x; c < p.cols; c += 256u) {
        let v = x[o + c];
        if (v > bv) {
            bv = v;
            bi = c;
        }
    }
    best_v[lid.x] = bv;
    best_i[lid.x] = bi;
    for (var s = 128u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lid.x < s) {
            let ov = best_v[lid.x + s];
            let oi = best_i[lid.x + s];
            if (ov > best_v[lid.x] || (ov == best_v[lid.x] && oi < best_i[lid.x])) {
                best_v[lid.x] = ov;
                best_i[lid.x] = oi;
            }
        }
    }
    if (lid.x == 0u) {
        out[wid.x] = min(best_i[0], p.cols - 1u);
    }
}
