// Tiled expert matmul for prefill: y[i, r] = Σ_c W[e][r, c] · x[i / x_div, c] for every (token,
// slot) pair i routed to expert e, from a chunk of a stacked expert weight [n_expert, rows, cols]
// (columns a multiple of 32).
//
// One workgroup of 256 threads per (BM rows of expert e, e, j-th group of BN pairs routed to e).
// The workgroup finds its group without a sort or a read-back: each thread counts the pairs
// routed to e in its own run of `ids`, a scan of the 256 counts numbers them in pair order, and
// the pairs numbered BN·j .. BN·j + BN − 1 form the tile. A group past the expert's count (most of
// them for an expert few tokens picked) ends after the scan, reading no weight. Then the tile of
// tile.wgsl: each weight dequantized once per BN pairs.

// Params and the bindings w, ids, y, p: mul_mat_id_grouped_params.wgsl.
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;

var<workgroup> counts: array<u32, 256>;
var<workgroup> pairs: array<u32, BN>;
var<workgroup> found: u32;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let li = lid.x;
    let e_local = wid.z / p.groups_t;
    let e = p.expert_first + e_local;
    let first = (wid.z % p.groups_t) * BN;

    // Number the pairs routed to e: each thread's run, then an inclusive scan of the counts.
    let span = (p.n_pairs + 255u) / 256u;
    let lo = min(li * span, p.n_pairs);
    let hi = min(lo + span, p.n_pairs);
    var mine = 0u;
    for (var i = lo; i < hi; i++) {
        mine += u32(ids[i] == e);
    }
    counts[li] = mine;
    for (var off = 1u; off < 256u; off <<= 1u) {
        workgroupBarrier();
        var v = counts[li];
        if (li >= off) {
            v += counts[li - off];
        }
        workgroupBarrier();
        counts[li] = v;
    }
    workgroupBarrier();
    var n = counts[li] - mine;
    for (var i = lo; i < hi; i++) {
        if (ids[i] == e) {
            if (n >= first && n < first + BN) {
                pairs[n - first] = i;
            }
            n++;
        }
    }
    if (li == 255u) {
        found = min(counts[255] - min(counts[255], first), BN);
    }
    let n_tile = workgroupUniformLoad(&found);
    if (n_tile == 0u) {
        return;
    }

    let r0 = (wid.x + wid.y * p.groups_x) * BM;
    let sr = li / 4u;
    let sk = (li % 4u) * 8u;
    var w_ok: array<bool, WQ>;
    var rb: array<u32, WQ>;
    for (var q = 0u; q < WQ; q++) {
        w_ok[q] = r0 + sr + 64u * q < p.rows;
        rb[q] = (e_local * p.rows + r0 + sr + 64u * q) * p.row_bytes;
    }
    var x_ok: array<bool, XQ>;
    var xo: array<u32, XQ>;
    for (var q = 0u; q < XQ; q++) {
        x_ok[q] = sr + 64u * q < n_tile;
        if (x_ok[q]) {
            xo[q] = ((pairs[sr + 64u * q] / p.x_div) * p.cols + sk) / 4u;
        }
    }
    let acc = tile_products(li, w_ok, rb, x_ok, xo);
    let r = r0 + (li % 16u) * TM;
    let tq = (li / 16u) * TN;
    for (var j = 0u; j < TN; j++) {
        if (tq + j < n_tile) {
            let o = pairs[tq + j] * p.y_stride;
            for (var i = 0u; i < TM; i++) {
                if (r + i < p.rows) {
                    y[o + r + i] = acc[j * WQ + i / 4u][i % 4u];
                }
            }
        }
    }
}
