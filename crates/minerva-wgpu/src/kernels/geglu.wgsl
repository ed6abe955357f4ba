// out = gelu_tanh(gate) * up, element-wise (PyTorch's gelu(approximate="tanh")).

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const SQRT_2_OVER_PI: f32 = 0.7978845608;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 256u;
    if (i < p.n) {
        let g = gate[i];
        // tanh(z) = 1 - 2 / (exp(2z) + 1): stays finite where WGSL's tanh may overflow exp.
        let z = clamp(SQRT_2_OVER_PI * (g + 0.044715 * g * g * g), -20.0, 20.0);
        let t = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
        out[i] = 0.5 * g * (1.0 + t) * up[i];
    }
}
