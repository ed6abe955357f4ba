// Decode matrix-vector product over whole blocks: y[t, off + r] = Σ_k W[r, k] · x[t, k] for a
// weight chunk of `rows` rows whose columns are a multiple of 32.
//
// One workgroup of 64 threads per (2 weight rows, token), 32 threads per row. Each thread takes a
// whole block of 32 values at a time (`dot32`, from the dtype's snippet: the block's covering
// words read once, the activations as vec4s), so a row's 32 threads read 1024 consecutive values
// per pass with a few wide loads each, where mul_mat.wgsl's decode path reads 8 values per
// thread through byte-addressed loads. The row's partial sums are reduced by `reduce_and_store`
// (mul_mat_reduce_{workgroup,subgroup}.wgsl).

struct Params {
    cols: u32,
    rows: u32,
    n_tok: u32,
    row_bytes: u32,
    y_offset: u32,   // first output column of this chunk
    y_stride: u32,   // output columns (all chunks)
    groups_x: u32,   // workgroups along x (rows may exceed the 65535 per-dimension limit)
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 64u;
const TPR: u32 = 32u;       // threads per row
const RPW: u32 = WG / TPR;  // rows per workgroup
const TILE_T: u32 = 1u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let lane = lid.x % TPR;
    let r = (wid.x + wid.y * p.groups_x) * RPW + lid.x / TPR;
    let t = wid.z;
    let in_range = r < p.rows;
    let rb = r * p.row_bytes;
    let xo = t * (p.cols / 4u);
    var acc: array<f32, 1>;
    if (in_range) {
        for (var k = lane * 32u; k < p.cols; k += TPR * 32u) {
            acc[0] += dot32(rb, k, xo + k / 4u);
        }
    }
    reduce_and_store(acc, in_range, lane, lid.x, r, t);
}
