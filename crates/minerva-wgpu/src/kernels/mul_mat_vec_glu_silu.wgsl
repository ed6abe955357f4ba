// silu(g) · u, as swiglu.wgsl computes it.

fn glu(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return g / (1.0 + exp(-g)) * u;
}
