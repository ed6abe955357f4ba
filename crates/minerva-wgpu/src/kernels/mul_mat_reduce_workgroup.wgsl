// mul_mat's reduction through workgroup memory: the portable fallback (GL, no subgroups).

var<workgroup> partial: array<f32, TILE_T * 64>;

fn reduce_and_store(acc: array<f32, TILE_T>, in_range: bool, lane: u32, li: u32, r: u32, t0: u32) {
    for (var t = 0u; t < TILE_T; t++) {
        partial[t * WG + li] = acc[t];
    }
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lane < s) {
            for (var t = 0u; t < TILE_T; t++) {
                partial[t * WG + li] += partial[t * WG + li + s];
            }
        }
    }
    workgroupBarrier();
    if (in_range && lane < TILE_T && t0 + lane < p.n_tok) {
        y[(t0 + lane) * p.y_stride + p.y_offset + r] = partial[lane * WG + li - lane];
    }
}
