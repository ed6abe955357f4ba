// gelu_tanh(g) · u, as geglu.wgsl computes it.

const SQRT_2_OVER_PI: f32 = 0.7978845608;

fn glu(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    let z = clamp(SQRT_2_OVER_PI * (g + 0.044715 * g * g * g), vec4<f32>(-20.0), vec4<f32>(20.0));
    let th = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
    return 0.5 * g * (1.0 + th) * u;
}
