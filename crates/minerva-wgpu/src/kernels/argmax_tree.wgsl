// argmax's workgroup reduction, shared by its two passes: the best (value, index) of the 256
// threads' candidates, the larger value winning and the lower index on ties.

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

struct Best {
    v: f32,
    i: u32,
}

fn best_of_workgroup(li: u32, v: f32, i: u32) -> Best {
    best_v[li] = v;
    best_i[li] = i;
    for (var s = 128u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (li < s) {
            let ov = best_v[li + s];
            let oi = best_i[li + s];
            if (ov > best_v[li] || (ov == best_v[li] && oi < best_i[li])) {
                best_v[li] = ov;
                best_i[li] = oi;
            }
        }
    }
    workgroupBarrier();
    return Best(best_v[0], best_i[0]);
}
