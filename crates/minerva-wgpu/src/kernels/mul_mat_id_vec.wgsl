// Expert matmul for decode over whole blocks: mul_mat_id.wgsl's work (each (token, slot) pair's
// row times its picked expert's matrix, from a chunk of a stacked expert weight) with
// mul_mat_vec.wgsl's loads: each of a row's 32 threads takes a whole block of 32 values at a time
// (`dot32`). Columns are a multiple of 32.

struct Params {
    cols: u32,
    rows: u32,          // rows per expert
    n_tok: u32,         // pairs
    row_bytes: u32,
    y_offset: u32,      // 0: every chunk writes whole expert rows
    y_stride: u32,      // = rows
    groups_x: u32,
    expert_first: u32,  // first expert in this chunk
    n_expert: u32,      // experts in this chunk
    x_div: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const WG: u32 = 64u;
const TPR: u32 = 32u;
const RPW: u32 = WG / TPR;
const TILE_T: u32 = 1u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r = (wid.x + wid.y * p.groups_x) * RPW + lid.x / TPR;
    let pair = wid.z;
    let e = ids[pair];
    let in_range = r < p.rows && e >= p.expert_first && e < p.expert_first + p.n_expert;
    let rb = ((e - p.expert_first) * p.rows + r) * p.row_bytes;
    let xo = (pair / p.x_div) * (p.cols / 4u);
    var acc: array<f32, 1>;
    if (in_range) {
        for (var k = lane * 32u; k < p.cols; k += TPR * 32u) {
            acc[0] += dot32(rb, k, xo + k / 4u);
        }
    }
    reduce_and_store(acc, in_range, lane, lid.x, r, pair);
}
