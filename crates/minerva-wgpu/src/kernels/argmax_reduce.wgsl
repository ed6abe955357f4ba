// argmax's second pass: one workgroup per row picks the best of its parts' (value bits, index)
// (the larger value, the lower index on ties).

struct Params {
    cols: u32,
    part_len: u32,
    parts: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> best: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var i = lid.x; i < p.parts; i += 256u) {
        let b = best[wid.x * p.parts + i];
        let v = bitcast<f32>(b.x);
        if (v > bv || (v == bv && b.y < bi)) {
            bv = v;
            bi = b.y;
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
