// The shared-memory tile of the tiled matrix kernels (mul_mat_tiled.wgsl, mul_mat_id_tiled.wgsl):
// a workgroup of 256 threads computes a tile of 64 weight rows × 64 activation rows, walking the
// columns 32 at a time. Per step every thread dequantizes 8 weights once (`load8`: one row of the
// tile, a quarter of the 32 columns) and loads 8 activations (two vec4s) into workgroup memory;
// after a barrier each thread multiplies 4 weight rows by 4 activation rows over the 32 columns
// (16 FMAs per two vec4 reads of workgroup memory). 16 KiB of workgroup memory, WebGPU's minimum.
//
//   ws[k * 16 + r / 4][r % 4] = W[r0 + r, k0 + k]       xs[k * 16 + t / 4][t % 4] = x[t0 + t, k0 + k]
//   thread li: stages row/activation li / 4, columns (li % 4) * 8 ..+8;
//              computes rows 4 * (li % 16) ..+4 × activations 4 * (li / 16) ..+4

const BM: u32 = 64u;  // weight rows per tile
const BN: u32 = 64u;  // activation rows per tile
const BK: u32 = 32u;  // columns per step

var<workgroup> ws: array<vec4<f32>, 512>;
var<workgroup> xs: array<vec4<f32>, 512>;

// This thread's 4 × 4 sums over every column (`p.cols`, a multiple of 32): per step it stages
// the weights of row byte `rb` (when `w_ok`) and the activations from vec4 index `xo` (when
// `x_ok`; zeros otherwise) at its place in the tile, then multiplies its share.
fn tile_products(li: u32, w_ok: bool, rb: u32, x_ok: bool, xo: u32) -> array<vec4<f32>, 4> {
    let sk = (li % 4u) * 8u;
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
    return acc;
}

// Writes this thread's 8 weights and 8 activations of the step into the tile (after the barrier
// that ends the previous step's reads).
fn stage(li: u32, v: array<f32, 8>, a: vec4<f32>, b: vec4<f32>) {
    let sk = (li % 4u) * 8u;
    let c = (li / 4u) / 4u;
    let e = (li / 4u) % 4u;
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
        ws[(sk + i) * 16u + c][e] = v[i];
    }
    xs[(sk + 0u) * 16u + c][e] = a.x;
    xs[(sk + 1u) * 16u + c][e] = a.y;
    xs[(sk + 2u) * 16u + c][e] = a.z;
    xs[(sk + 3u) * 16u + c][e] = a.w;
    xs[(sk + 4u) * 16u + c][e] = b.x;
    xs[(sk + 5u) * 16u + c][e] = b.y;
    xs[(sk + 6u) * 16u + c][e] = b.z;
    xs[(sk + 7u) * 16u + c][e] = b.w;
    workgroupBarrier();
}

// acc[j][i] += Σ_k ws[k][4·(li % 16) + i] · xs[k][4·(li / 16) + j] over the step's 32 columns.
fn multiply(li: u32, acc: ptr<function, array<vec4<f32>, 4>>) {
    let rq = li % 16u;
    let tq = li / 16u;
    for (var k = 0u; k < BK; k++) {
        let wv = ws[k * 16u + rq];
        let xv = xs[k * 16u + tq];
        (*acc)[0] += wv * xv.x;
        (*acc)[1] += wv * xv.y;
        (*acc)[2] += wv * xv.z;
        (*acc)[3] += wv * xv.w;
    }
}
