// Expert matmul for prefill, tokens grouped by expert: y[i, r] = Σ_c W[e][r, c] · x[i / x_div, c]
// for every (token, slot) pair i routed to expert e (ids[i] == e), from a chunk of a stacked
// expert weight [n_expert, rows, cols] in its stored dtype.
//
// One workgroup per (8 weight rows, expert of the chunk). It gathers the pairs routed to its
// expert in tiles of TILE_T (thread 0 scans `ids`), then dequantizes each chunk of 8 weights once
// for the whole tile, as mul_mat's prefill tiles do for consecutive tokens. An expert nobody
// picked costs one scan of `ids` and reads none of its weights.
//
//   ids:  [e3 e0 | e1 e3 | e3 e2 | ...]   (k per token)  -> tile for e3: pairs 0, 3, 4, ...

// Params and the bindings w, ids, y, p: mul_mat_id_grouped_params.wgsl.
@group(0) @binding(1) var<storage, read> x: array<f32>;

const WG: u32 = 64u;
const TPR: u32 = 8u;  // threads per row
const RPW: u32 = 8u;  // rows per workgroup
const TILE_T: u32 = 8u;

var<workgroup> tile: array<u32, TILE_T>;
var<workgroup> found: u32;
var<workgroup> cursor: u32;
var<workgroup> partial: array<f32, TILE_T * 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r = (wid.x + wid.y * p.groups_x) * RPW + lid.x / TPR;
    let e = p.expert_first + wid.z;
    let in_range = r < p.rows;
    let rb = (wid.z * p.rows + r) * p.row_bytes;
    let full = p.cols & ~7u;
    if (lid.x == 0u) {
        cursor = 0u;
    }
    loop {
        workgroupBarrier();
        if (lid.x == 0u) {
            var n = 0u;
            var i = cursor;
            while (i < p.n_pairs && n < TILE_T) {
                if (ids[i] == e) {
                    tile[n] = i;
                    n++;
                }
                i++;
            }
            cursor = i;
            found = n;
        }
        let n = workgroupUniformLoad(&found);
        if (n == 0u) {
            break;
        }
        var acc: array<f32, TILE_T>;
        if (in_range) {
            for (var c = lane * 8u; c < full; c += TPR * 8u) {
                let v = load8(rb, c);
                for (var t = 0u; t < n; t++) {
                    let xo = (tile[t] / p.x_div) * p.cols + c;
                    var s = 0.0;
                    for (var i = 0u; i < 8u; i++) {
                        s += v[i] * x[xo + i];
                    }
                    acc[t] += s;
                }
            }
            for (var c = full + lane; c < p.cols; c += TPR) {
                let v = load1(rb, c);
                for (var t = 0u; t < n; t++) {
                    acc[t] += v * x[(tile[t] / p.x_div) * p.cols + c];
                }
            }
        }
        // Each row's 8 lanes reduce their partial sums in workgroup memory.
        for (var t = 0u; t < TILE_T; t++) {
            partial[t * WG + lid.x] = acc[t];
        }
        for (var s = TPR / 2u; s > 0u; s >>= 1u) {
            workgroupBarrier();
            if (lane < s) {
                for (var t = 0u; t < TILE_T; t++) {
                    partial[t * WG + lid.x] += partial[t * WG + lid.x + s];
                }
            }
        }
        workgroupBarrier();
        if (in_range && lane < n) {
            y[tile[lane] * p.y_stride + r] = partial[lane * WG + lid.x - lane];
        }
    }
}
