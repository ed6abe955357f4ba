// mul_mat's reduction with subgroup shuffles (devices with SUBGROUP and subgroups of at least
// 8): each run of 8 lanes of a row exchanges partial sums by XOR butterfly, no workgroup memory,
// no barrier; rows of more than 8 lanes (TPR 16, 32) then add their runs' sums through workgroup
// memory (one barrier), which works whatever the subgroup size above 8. Assumes, as every
// implementation does, that a subgroup is a run of consecutive local invocation indices, so 8
// consecutive lanes share one subgroup. Every thread runs the shuffles (uniform control flow);
// only lane 0 of a row stores.

var<workgroup> runs: array<f32, TILE_T * 8>;

fn reduce_and_store(acc: array<f32, TILE_T>, in_range: bool, lane: u32, li: u32, r: u32, t0: u32) {
    var sums = acc;
    for (var t = 0u; t < TILE_T; t++) {
        var v = sums[t];
        v += subgroupShuffleXor(v, 4u);
        v += subgroupShuffleXor(v, 2u);
        v += subgroupShuffleXor(v, 1u);
        sums[t] = v;
    }
    if (TPR > 8u) {
        if (li % 8u == 0u) {
            for (var t = 0u; t < TILE_T; t++) {
                runs[t * 8u + li / 8u] = sums[t];
            }
        }
        workgroupBarrier();
        if (lane == 0u) {
            for (var t = 0u; t < TILE_T; t++) {
                var v = 0.0;
                for (var k = 0u; k < TPR / 8u; k++) {
                    v += runs[t * 8u + li / 8u + k];
                }
                sums[t] = v;
            }
        }
    }
    if (in_range && lane == 0u) {
        for (var t = 0u; t < TILE_T; t++) {
            if (t0 + t < p.n_tok) {
                y[(t0 + t) * p.y_stride + p.y_offset + r] = sums[t];
            }
        }
    }
}
