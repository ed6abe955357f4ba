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
    let top = best_of_workgroup(lid.x, bv, bi);
    if (lid.x == 0u) {
        out[wid.x] = min(top.i, p.cols - 1u);
    }
}
