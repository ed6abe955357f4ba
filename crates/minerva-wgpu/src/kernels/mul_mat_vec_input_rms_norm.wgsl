// mul_mat_vec's input normalised as it is read: rms_norm(x4, g4, eps) with eps in `p.aux`. Each
// workgroup finds its activation rows' scales exactly as rms_norm.wgsl does (256 threads, the same
// partial sums and tree), so every product equals the one of the normed row rms_norm.wgsl writes.

@group(0) @binding(3) var<storage, read> g4: array<vec4<f32>>;

var<workgroup> norm_partial: array<f32, 256>;
var<workgroup> norm_scale: array<f32, NT>;

fn prepare(t0: u32, li: u32) {
    let eps = bitcast<f32>(p.aux);
    for (var t = 0u; t < NT; t++) {
        var s = 0.0;
        if (t0 + t < p.n_tok) {
            let o = (t0 + t) * p.cols;
            for (var c = li; c < p.cols; c += 256u) {
                let v = x4[(o + c) / 4u][(o + c) % 4u];
                s += v * v;
            }
        }
        norm_partial[li] = s;
        for (var k = 128u; k > 0u; k >>= 1u) {
            workgroupBarrier();
            if (li < k) {
                norm_partial[li] += norm_partial[li + k];
            }
        }
        workgroupBarrier();
        if (li == 0u) {
            norm_scale[t] = 1.0 / sqrt(norm_partial[0] / f32(p.cols) + eps);
        }
        workgroupBarrier();
    }
}

fn stage(k0: u32, t0: u32, li: u32) {}

fn xin(t: u32, i: u32) -> vec4<f32> {
    return x4[i] * norm_scale[t] * g4[i % (p.cols / 4u)];
}
