// mul_mat_vec_staged's input: gelu_tanh(gate) · up, gate in x4, computed as geglu.wgsl computes
// it, once per workgroup and pass (256 vec4s of columns per activation row) into workgroup memory.

@group(0) @binding(3) var<storage, read> up4: array<vec4<f32>>;

const SQRT_2_OVER_PI: f32 = 0.7978845608;

var<workgroup> staged: array<vec4<f32>, NT * 256u>;

// The gated values of vec4 columns k0 / 4 .. + 256 of the workgroup's activation rows.
fn stage(k0: u32, t0: u32, li: u32) {
    let c4 = p.cols / 4u;
    let k4 = k0 / 4u + li;
    for (var t = 0u; t < NT; t++) {
        if (t0 + t < p.n_tok && k4 < c4) {
            let i = (t0 + t) * c4 + k4;
            let g = x4[i];
            let z = clamp(SQRT_2_OVER_PI * (g + 0.044715 * g * g * g), vec4<f32>(-20.0), vec4<f32>(20.0));
            let th = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
            staged[t * 256u + li] = 0.5 * g * (1.0 + th) * up4[i];
        }
    }
}

// Input vec4 `i` (row-major over the activation rows) of the workgroup's row `t`, from this pass.
fn xin(t: u32, i: u32) -> vec4<f32> {
    return staged[t * 256u + (i % (p.cols / 4u)) % 256u];
}
