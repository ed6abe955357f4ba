// The block kernels' row sums through workgroup memory alone: the portable fallback (GL, no
// subgroups). Every lane's partial sum is stored; one thread per (row, activation row) adds the
// row's 32.

var<workgroup> red: array<f32, NT * WG>;

fn stash(acc: array<f32, NT>, li: u32) {
    for (var t = 0u; t < NT; t++) {
        red[t * WG + li] = acc[t];
    }
}

fn row_sum(t: u32, row: u32) -> f32 {
    let o = t * WG + row * TPR;
    var s = 0.0;
    for (var i = 0u; i < TPR; i++) {
        s += red[o + i];
    }
    return s;
}
