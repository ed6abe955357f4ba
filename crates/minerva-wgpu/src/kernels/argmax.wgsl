// Greedy decoding: the index of each row's largest value (the first one on ties, as
// Iterator::max_by with a strict comparison), in two passes so that a long row (a vocabulary of
// 200k) is read by many workgroups at once. This pass: one workgroup per (part of a row, row)
// writes its part's best (value bits, index); argmax_reduce.wgsl picks among the parts.

struct Params {
    cols: u32,
    part_len: u32,  // values per part
    parts: u32,     // parts per row
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> best: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> p: Params;


@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = wid.y * p.cols;
    let lo = wid.x * p.part_len;
    let hi = min(lo + p.part_len, p.cols);
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var c = lo + lid.x; c < hi; c += 256u) {
        let v = x[o + c];
        if (v > bv) {
            bv = v;
            bi = c;
        }
    }
    let top = best_of_workgroup(lid.x, bv, bi);
    if (lid.x == 0u) {
        best[wid.y * p.parts + wid.x] = vec2<u32>(bitcast<u32>(top.v), top.i);
    }
}
