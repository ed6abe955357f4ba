// The shared-memory tile of the tiled matrix kernels (mul_mat_tiled.wgsl, mul_mat_id_tiled.wgsl):
// a workgroup of 256 threads computes a tile of BM weight rows × BN activation rows, walking the
// columns 32 at a time. The shape is chosen per device and product from the tiles whose workgroup
// memory the adapter offers (tile.rs): each thread computes TM weight rows × TN activation rows
// (4 × 4: 64 × 64 in 16 KiB, WebGPU's guaranteed minimum; 8 × 4: 128 × 64 in 24 KiB; 8 × 8:
// 128 × 128 in 32 KiB). Per step every thread dequantizes 8 weights of TM / 4 rows (`load8`: a
// quarter of the 32 columns of each) and loads 8 activations of TN / 4 rows into workgroup
// memory; after a barrier it multiplies its TM rows by its TN activation rows over the 32 columns
// (TM · TN FMAs per (TM + TN) / 4 vec4 reads of workgroup memory).
//
//   ws[k * BM/4 + r / 4][r % 4] = W[r0 + r, k0 + k]     xs[k * BN/4 + t / 4][t % 4] = x[t0 + t, k0 + k]
//   thread li: stages rows li / 4 + 64 q (q < TM / 4) and activation rows li / 4 + 64 q
//              (q < TN / 4), columns (li % 4) * 8 ..+8;
//              computes rows TM * (li % 16) ..+TM × activation rows TN * (li / 16) ..+TN

const TM: u32 = {{TM}}u;    // weight rows per thread
const TN: u32 = {{TN}}u;    // activation rows per thread
const BM: u32 = 16u * TM;   // weight rows per tile
const BN: u32 = 16u * TN;   // activation rows per tile
const BK: u32 = 32u;        // columns per step
const WQ: u32 = TM / 4u;    // weight rows each thread stages, and vec4s of rows it computes
const XQ: u32 = TN / 4u;    // activation rows each thread stages

var<workgroup> ws: array<vec4<f32>, BM * 8u>;
var<workgroup> xs: array<vec4<f32>, BN * 8u>;

// This thread's TM × TN sums over every column (`p.cols`, a multiple of 32), `acc[j * WQ + m]`
// holding rows TM·(li % 16) + 4m ..+4 for activation row TN·(li / 16) + j. Per step it stages
// the weights of the rows at bytes `rb[q]` (where `w_ok[q]`) and the activations from vec4
// indices `xo[q]` (where `x_ok[q]`; zeros otherwise), the rows li / 4 + 64 q of the tile.
fn tile_products(
    li: u32, w_ok: array<bool, WQ>, rb: array<u32, WQ>, x_ok: array<bool, XQ>, xo: array<u32, XQ>
) -> array<vec4<f32>, TN * WQ> {
    let sk = (li % 4u) * 8u;
    var acc: array<vec4<f32>, TN * WQ>;
    for (var k0 = 0u; k0 < p.cols; k0 += BK) {
        var v: array<array<f32, 8>, WQ>;
        for (var q = 0u; q < WQ; q++) {
            if (w_ok[q]) {
                v[q] = load8(rb[q], k0 + sk);
            }
        }
        var a: array<vec4<f32>, 2u * XQ>;
        for (var q = 0u; q < XQ; q++) {
            if (x_ok[q]) {
                a[2u * q] = x4[xo[q] + k0 / 4u];
                a[2u * q + 1u] = x4[xo[q] + k0 / 4u + 1u];
            }
        }
        stage(li, v, a);
        multiply(li, &acc);
    }
    return acc;
}

// Writes this thread's weights and activations of the step into the tile (after the barrier
// that ends the previous step's reads).
fn stage(li: u32, v: array<array<f32, 8>, WQ>, a: array<vec4<f32>, 2u * XQ>) {
    let sk = (li % 4u) * 8u;
    let c = (li / 4u) / 4u;
    let e = (li / 4u) % 4u;
    workgroupBarrier();
    for (var q = 0u; q < WQ; q++) {
        for (var i = 0u; i < 8u; i++) {
            ws[(sk + i) * (BM / 4u) + 16u * q + c][e] = v[q][i];
        }
    }
    for (var q = 0u; q < XQ; q++) {
        for (var i = 0u; i < 4u; i++) {
            xs[(sk + i) * (BN / 4u) + 16u * q + c][e] = a[2u * q][i];
            xs[(sk + 4u + i) * (BN / 4u) + 16u * q + c][e] = a[2u * q + 1u][i];
        }
    }
    workgroupBarrier();
}

// acc[j · WQ + m][i] += Σ_k W[TM·(li % 16) + 4m + i] · x[TN·(li / 16) + j] over the step's 32
// columns.
fn multiply(li: u32, acc: ptr<function, array<vec4<f32>, TN * WQ>>) {
    let rq = (li % 16u) * WQ;
    let tq = (li / 16u) * XQ;
    for (var k = 0u; k < BK; k++) {
        var wv: array<vec4<f32>, WQ>;
        for (var m = 0u; m < WQ; m++) {
            wv[m] = ws[k * (BM / 4u) + rq + m];
        }
        for (var n = 0u; n < XQ; n++) {
            let xv = xs[k * (BN / 4u) + tq + n];
            for (var m = 0u; m < WQ; m++) {
                (*acc)[(4u * n) * WQ + m] += wv[m] * xv.x;
                (*acc)[(4u * n + 1u) * WQ + m] += wv[m] * xv.y;
                (*acc)[(4u * n + 2u) * WQ + m] += wv[m] * xv.z;
                (*acc)[(4u * n + 3u) * WQ + m] += wv[m] * xv.w;
            }
        }
    }
}
