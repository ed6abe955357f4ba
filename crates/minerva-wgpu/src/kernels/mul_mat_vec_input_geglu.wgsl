// mul_mat_vec's input gated as it is read: gelu_tanh(gate) · up, gate in x4, as geglu.wgsl
// computes it.

@group(0) @binding(3) var<storage, read> up4: array<vec4<f32>>;

const SQRT_2_OVER_PI: f32 = 0.7978845608;

fn prepare(t0: u32, li: u32) {}

fn xin(t: u32, i: u32) -> vec4<f32> {
    let g = x4[i];
    let z = clamp(SQRT_2_OVER_PI * (g + 0.044715 * g * g * g), vec4<f32>(-20.0), vec4<f32>(20.0));
    let th = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
    return 0.5 * g * (1.0 + th) * up4[i];
}
