// Tiled matrix product for prefill and batched decode: y[t, off + r] = Σ_k W[r, k] · x[t, k] for
// a weight chunk of `rows` rows whose columns are a multiple of 32, `n_tok` activation rows.
// One workgroup of 256 threads per tile of 64 rows × 64 activation rows (tile.wgsl): each weight
// is dequantized once per 64 activation rows, against 8 in mul_mat.wgsl's prefill path.

struct Params {
    cols: u32,
    rows: u32,
    n_tok: u32,
    row_bytes: u32,
    y_offset: u32,   // first output column of this chunk
    y_stride: u32,   // output columns (all chunks)
    groups_x: u32,   // workgroups along x (tiles of rows may exceed the 65535 per-dimension limit)
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

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
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < p.cols; k0 += BK) {
        var v: array<f32, 8>;
        if (w_ok) {
            v = load8(rb, k0 + sk);
        }
        var a = vec4<f32>(0.0);
        var b = vec4<f32>(0.0);
        if (x_ok) {
            a = x4[xo + k0 / 4u];
            b = x4[xo + k0 / 4u + 1u];
        }
        stage(li, v, a, b);
        multiply(li, &acc);
    }
    let r = r0 + (li % 16u) * 4u;
    let t = t0 + (li / 16u) * 4u;
    for (var j = 0u; j < 4u; j++) {
        if (t + j < p.n_tok) {
            let o = (t + j) * p.y_stride + p.y_offset;
            for (var i = 0u; i < 4u; i++) {
                if (r + i < p.rows) {
                    y[o + r + i] = acc[j][i];
                }
            }
        }
    }
}
