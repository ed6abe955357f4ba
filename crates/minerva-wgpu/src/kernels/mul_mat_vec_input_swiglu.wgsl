// mul_mat_vec's input gated as it is read: silu(gate) · up, gate in x4, as swiglu.wgsl computes it.

@group(0) @binding(3) var<storage, read> up4: array<vec4<f32>>;

fn prepare(t0: u32, li: u32) {}

fn xin(t: u32, i: u32) -> vec4<f32> {
    let g = x4[i];
    return g / (1.0 + exp(-g)) * up4[i];
}
