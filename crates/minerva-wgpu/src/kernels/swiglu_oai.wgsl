// OpenAI's clamped SwiGLU (GPT-OSS), in place over the gate:
//   g = min(gate, limit), u = clamp(up, -limit, limit), gate = g · σ(alpha · g) · (u + 1)

struct Params {
    n: u32,
    alpha: f32,
    limit: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 256u;
    if (i < p.n) {
        let g = min(gate[i], p.limit);
        let u = clamp(up[i], -p.limit, p.limit);
        gate[i] = g / (1.0 + exp(-p.alpha * g)) * (u + 1.0);
    }
}
