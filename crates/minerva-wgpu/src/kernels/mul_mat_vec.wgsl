// Matrix-vector products over whole blocks, for decode and small batches: y[t, off + r] =
// Σ_k W[r, k] · x[t, k] for a weight chunk of `rows` rows whose columns are a multiple of 32,
// NT activation rows per workgroup.
//
// One workgroup of 256 threads per (8 weight rows, NT activation rows), 32 threads per row. Each
// thread dequantizes a whole block of 32 values at a time (`block32`, from the dtype's snippet:
// the block's covering words read once) and multiplies it into its NT activation rows (read as
// vec4s), so a row's 32 threads read 1024 consecutive values per pass, each weight once for the
// NT rows. The row's partial sums are added by `stash` (mul_mat_vec_reduce_*.wgsl) and one
// thread per (row, activation row).

// Params and the bindings w, y, p: mul_mat_params.wgsl. The input is x4 as stored, or computed
// from it as it is read (`prepare`, `stage` and `xin` from mul_mat_vec_input_*.wgsl).
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
// With a bias: `bias` (added as each sum is stored, as add_bias.wgsl adds it).
{{BIAS_DECL}}

const WG: u32 = 256u;
const TPR: u32 = 32u;       // threads per row
const RPW: u32 = WG / TPR;  // rows per workgroup
const NT: u32 = {{NT}}u;    // activation rows per workgroup

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r = (wid.x + wid.y * p.groups_x) * RPW + lid.x / TPR;
    let t0 = wid.z * NT;
    let rb = r * p.row_bytes;
    let c4 = p.cols / 4u;
    // The input's per-row state (the deferred norm's scale), before any thread diverges.
    prepare(t0, lid.x);
    var acc: array<f32, NT>;
    // Passes of 1024 columns, one per lane step. Inputs worth computing once per workgroup (the
    // gated products) are staged before each pass (`stage`), between barriers ({{PASS_BARRIER}}:
    // `workgroupBarrier()` then, empty otherwise); every thread runs every pass.
    for (var k0 = 0u; k0 < p.cols; k0 += TPR * 32u) {
        stage(k0, t0, lid.x);
        {{PASS_BARRIER}};
        let k = k0 + lane * 32u;
        if (r < p.rows && k < p.cols) {
            let v = block32(rb, k);
            for (var t = 0u; t < NT; t++) {
                if (t0 + t < p.n_tok) {
                    let xo = (t0 + t) * c4 + k / 4u;
                    acc[t] += dot(v[0], xin(t, xo)) + dot(v[1], xin(t, xo + 1u)) + dot(v[2], xin(t, xo + 2u))
                        + dot(v[3], xin(t, xo + 3u)) + dot(v[4], xin(t, xo + 4u)) + dot(v[5], xin(t, xo + 5u))
                        + dot(v[6], xin(t, xo + 6u)) + dot(v[7], xin(t, xo + 7u));
                }
            }
        }
        {{PASS_BARRIER}};
    }
    stash(acc, lid.x);
    workgroupBarrier();
    // Thread i < RPW·NT adds row i % RPW's partial sums for activation row i / RPW.
    if (lid.x < RPW * NT) {
        let row = lid.x % RPW;
        let t = lid.x / RPW;
        let out_row = (wid.x + wid.y * p.groups_x) * RPW + row;
        if (out_row < p.rows && t0 + t < p.n_tok) {
            y[(t0 + t) * p.y_stride + p.y_offset + out_row] = row_sum(t, row){{BIAS}};
        }
    }
}
