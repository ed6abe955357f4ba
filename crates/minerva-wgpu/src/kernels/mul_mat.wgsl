// y[t, off + r] = Σ_k W[r, k] · x[t, k] for a weight chunk of `rows` rows in its stored dtype
// (load8/load1 from the dequant snippet), `n_tok` activation rows of `cols` f32.
//
// One workgroup of 64 threads per (64 / TPR weight rows, tile of TILE_T tokens), TPR threads per
// row: each thread dequantizes strided chunks of 8 weights once and multiplies them into TILE_T
// token rows, then each row's TPR partial sums per token are reduced. Decode (TILE_T = 1, a
// fused dequantize × vector) runs 32 threads per row, so a row's threads read 256 consecutive
// values at a time (coalesced) and a matrix has enough threads in flight to cover the memory's
// latency; prefill (TILE_T = 8, a weight read serves 8 tokens) runs 8 per row. The reduction,
// `reduce_and_store`, comes from mul_mat_reduce_{workgroup,subgroup}.wgsl.

// Params and the bindings w, y, p: mul_mat_params.wgsl.
@group(0) @binding(1) var<storage, read> x: array<f32>;

const WG: u32 = 64u;
const TPR: u32 = {{TPR}}u;  // threads per row
const RPW: u32 = WG / TPR;  // rows per workgroup
const TILE_T: u32 = {{TILE_T}}u;


@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r = (wid.x + wid.y * p.groups_x) * RPW + lid.x / TPR;
    let t0 = wid.z * TILE_T;
    let rb = r * p.row_bytes;
    let in_range = r < p.rows;
    var acc: array<f32, {{TILE_T}}>;
    let full = p.cols & ~7u;
    if (in_range) {
        for (var c = lane * 8u; c < full; c += TPR * 8u) {
            var v = load8(rb, c);
            for (var t = 0u; t < TILE_T; t++) {
                if (t0 + t < p.n_tok) {
                    let xo = (t0 + t) * p.cols + c;
                    var s = 0.0;
                    for (var i = 0u; i < 8u; i++) {
                        s += v[i] * x[xo + i];
                    }
                    acc[t] += s;
                }
            }
        }
        for (var c = full + lane; c < p.cols; c += TPR) {
            let v = load1(rb, c);
            for (var t = 0u; t < TILE_T; t++) {
                if (t0 + t < p.n_tok) {
                    acc[t] += v * x[(t0 + t) * p.cols + c];
                }
            }
        }
    }
    reduce_and_store(acc, in_range, lane, lid.x, r, t0);
}
