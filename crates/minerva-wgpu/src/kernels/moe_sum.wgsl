// The mixture's output: out[t, c] = Σ_j weights[t·k + j] · y[t·k + j, c], the routing weights
// times each picked expert's output row.

struct Params {
    n: u32,      // rows × len
    len: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> y: array<f32>;
@group(0) @binding(1) var<storage, read> weights: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 256u;
    if (i < p.n) {
        let t = i / p.len;
        let c = i % p.len;
        var s = 0.0;
        for (var j = 0u; j < p.k; j++) {
            let pair = t * p.k + j;
            s += weights[pair] * y[pair * p.len + c];
        }
        out[i] = s;
    }
}
