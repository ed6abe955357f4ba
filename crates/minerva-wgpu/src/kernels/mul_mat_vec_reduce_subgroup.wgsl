// The block kernels' row sums with subgroup shuffles (subgroups of at least 8): each run of 8
// lanes adds its partial sums by XOR butterfly, then the row's 4 run sums go through workgroup
// memory. Assumes a subgroup is a run of consecutive local invocation indices (every
// implementation does), so 8 consecutive lanes share one.

var<workgroup> red: array<f32, NT * WG / 8u>;

fn stash(acc: array<f32, NT>, li: u32) {
    for (var t = 0u; t < NT; t++) {
        var v = acc[t];
        v += subgroupShuffleXor(v, 4u);
        v += subgroupShuffleXor(v, 2u);
        v += subgroupShuffleXor(v, 1u);
        if (li % 8u == 0u) {
            red[t * (WG / 8u) + li / 8u] = v;
        }
    }
}

fn row_sum(t: u32, row: u32) -> f32 {
    let o = t * (WG / 8u) + row * (TPR / 8u);
    var s = 0.0;
    for (var i = 0u; i < TPR / 8u; i++) {
        s += red[o + i];
    }
    return s;
}
