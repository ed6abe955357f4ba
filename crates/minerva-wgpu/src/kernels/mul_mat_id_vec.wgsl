// Expert matmul for decode over whole blocks: mul_mat_id.wgsl's work (each (token, slot) pair's
// row times its picked expert's matrix, from a chunk of a stacked expert weight) with
// mul_mat_vec.wgsl's loads: 256 threads per (8 rows, pair), each of a row's 32 threads
// dequantizing a whole block of 32 values at a time (`block32`). Columns are a multiple of 32.

// Params and the bindings w, ids, y, p: mul_mat_id_params.wgsl.
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;

const WG: u32 = 256u;
const TPR: u32 = 32u;
const RPW: u32 = WG / TPR;
const NT: u32 = 1u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r0 = (wid.x + wid.y * p.groups_x) * RPW;
    let r = r0 + lid.x / TPR;
    let pair = wid.z;
    let e = ids[pair];
    let mine = e >= p.expert_first && e < p.expert_first + p.n_expert;
    let rb = ((e - p.expert_first) * p.rows + r) * p.row_bytes;
    let xo = (pair / p.x_div) * (p.cols / 4u);
    var acc: array<f32, 1>;
    if (mine && r < p.rows) {
        for (var k = lane * 32u; k < p.cols; k += TPR * 32u) {
            let v = block32(rb, k);
            let o = xo + k / 4u;
            acc[0] += dot(v[0], x4[o]) + dot(v[1], x4[o + 1u]) + dot(v[2], x4[o + 2u]) + dot(v[3], x4[o + 3u])
                + dot(v[4], x4[o + 4u]) + dot(v[5], x4[o + 5u]) + dot(v[6], x4[o + 6u]) + dot(v[7], x4[o + 7u]);
        }
    }
    stash(acc, lid.x);
    workgroupBarrier();
    if (mine && lid.x < RPW && r0 + lid.x < p.rows) {
        y[pair * p.y_stride + r0 + lid.x] = row_sum(0u, lid.x);
    }
}
