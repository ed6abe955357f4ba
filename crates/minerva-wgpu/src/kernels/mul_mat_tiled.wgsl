// Tiled matrix product for prefill and batched decode: y[t, off + r] = Σ_k W[r, k] · x[t, k] for
// a weight chunk of `rows` rows whose columns are a multiple of 32, `n_tok` activation rows.
// One workgroup of 256 threads per tile of BM rows × BN activation rows (tile.wgsl): each weight
// is dequantized once per BN activation rows, against 8 in mul_mat.wgsl's prefill path.

// Params and the bindings w, y, p: mul_mat_params.wgsl.
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
// With a bias: `bias` (added as each sum is stored, as add_bias.wgsl adds it).
{{BIAS_DECL}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let li = lid.x;
    let r0 = (wid.x + wid.y * p.groups_x) * BM;
    let t0 = wid.z * BN;
    let sr = li / 4u;
    let sk = (li % 4u) * 8u;
    var w_ok: array<bool, WQ>;
    var rb: array<u32, WQ>;
    for (var q = 0u; q < WQ; q++) {
        w_ok[q] = r0 + sr + 64u * q < p.rows;
        rb[q] = (r0 + sr + 64u * q) * p.row_bytes;
    }
    var x_ok: array<bool, XQ>;
    var xo: array<u32, XQ>;
    for (var q = 0u; q < XQ; q++) {
        x_ok[q] = t0 + sr + 64u * q < p.n_tok;
        xo[q] = ((t0 + sr + 64u * q) * p.cols + sk) / 4u;
    }
    let acc = tile_products(li, w_ok, rb, x_ok, xo);
    let r = r0 + (li % 16u) * TM;
    let t = t0 + (li / 16u) * TN;
    for (var j = 0u; j < TN; j++) {
        if (t + j < p.n_tok) {
            let o = (t + j) * p.y_stride + p.y_offset;
            for (var i = 0u; i < TM; i++) {
                if (r + i < p.rows) {
                    y[o + r + i] = acc[j * WQ + i / 4u][i % 4u]{{BIAS}};
                }
            }
        }
    }
}
