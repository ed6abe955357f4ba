// Tiled matrix product for prefill and batched decode: y[t, off + r] = Σ_k W[r, k] · x[t, k] for
// a weight chunk of `rows` rows whose columns are a multiple of 32, `n_tok` activation rows.
// One workgroup of 256 threads per tile of 64 rows × 64 activation rows (tile.wgsl): each weight
// is dequantized once per 64 activation rows, against 8 in mul_mat.wgsl's prefill path.

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
    let w_ok = r0 + sr < p.rows;
    let rb = (r0 + sr) * p.row_bytes;
    let x_ok = t0 + sr < p.n_tok;
    let xo = ((t0 + sr) * p.cols + sk) / 4u;
    let acc = tile_products(li, w_ok, rb, x_ok, xo);
    let r = r0 + (li % 16u) * 4u;
    let t = t0 + (li / 16u) * 4u;
    for (var j = 0u; j < 4u; j++) {
        if (t + j < p.n_tok) {
            let o = (t + j) * p.y_stride + p.y_offset;
            for (var i = 0u; i < 4u; i++) {
                if (r + i < p.rows) {
                    y[o + r + i] = acc[j][i]{{BIAS}};
                }
            }
        }
    }
}
