// mul_mat_vec.wgsl for an input computed as it is read at a cost worth sharing (a gated product:
// an exp per value): the columns go in passes of 1024 (one per lane step), and before each pass
// the workgroup's 256 threads compute that pass's inputs once into workgroup memory (`stage`,
// from mul_mat_vec_input_gated.wgsl), which every weight row then reads (`xin`).
// Otherwise as mul_mat_vec.wgsl: the same blocks, order of sums and reduction, so the same bits.

// Params and the bindings w, y, p: mul_mat_params.wgsl.
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;

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
    var acc: array<f32, NT>;
    // Every thread runs every pass (the barriers), whether or not it has a row.
    for (var k0 = 0u; k0 < p.cols; k0 += TPR * 32u) {
        stage(k0, t0, lid.x);
        workgroupBarrier();
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
        workgroupBarrier();
    }
    stash(acc, lid.x);
    workgroupBarrier();
    // Thread i < RPW·NT adds row i % RPW's partial sums for activation row i / RPW.
    if (lid.x < RPW * NT) {
        let row = lid.x % RPW;
        let t = lid.x / RPW;
        let out_row = (wid.x + wid.y * p.groups_x) * RPW + row;
        if (out_row < p.rows && t0 + t < p.n_tok) {
            y[(t0 + t) * p.y_stride + p.y_offset + out_row] = row_sum(t, row);
        }
    }
}
