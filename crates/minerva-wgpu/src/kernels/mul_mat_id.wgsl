// Expert matmul: y[i, r] = Σ_c W[ids[i]][r, c] · x[i / x_div, c] for every (token, slot) pair i,
// from a chunk of a stacked expert weight [n_expert, rows, cols] in its stored dtype. Only the
// picked experts' rows are read; pairs whose expert lies in another chunk do nothing.
//
//   stacked weight:  | expert 0: rows × cols | expert 1 | ... |   (chunks hold whole experts)
//   x:  gate/up: one row per token (x_div = k); down: one row per pair (x_div = 1)
//
// One workgroup per (64 / TPR weight rows, pair), TPR threads per row, as mul_mat's decode path;
// the reduction `reduce_and_store` is mul_mat's (workgroup memory or subgroup shuffles).

// Params and the bindings w, ids, y, p: mul_mat_id_params.wgsl.
@group(0) @binding(1) var<storage, read> x: array<f32>;

const WG: u32 = 64u;
const TPR: u32 = {{TPR}}u;  // threads per row
const RPW: u32 = WG / TPR;  // rows per workgroup
const TILE_T: u32 = 1u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r = (wid.x + wid.y * p.groups_x) * RPW + lid.x / TPR;
    let pair = wid.z;
    let e = ids[pair];
    let in_range = r < p.rows && e >= p.expert_first && e < p.expert_first + p.n_expert;
    let rb = ((e - p.expert_first) * p.rows + r) * p.row_bytes;
    let xo = (pair / p.x_div) * p.cols;
    var acc: array<f32, 1>;
    let full = p.cols & ~7u;
    if (in_range) {
        for (var c = lane * 8u; c < full; c += TPR * 8u) {
            let v = load8(rb, c);
            var s = 0.0;
            for (var i = 0u; i < 8u; i++) {
                s += v[i] * x[xo + c + i];
            }
            acc[0] += s;
        }
        for (var c = full + lane; c < p.cols; c += TPR) {
            acc[0] += load1(rb, c) * x[xo + c];
        }
    }
    reduce_and_store(acc, in_range, lane, lid.x, r, pair);
}
