// y[i, c] += B[ids[i], c]: each (token, slot) pair's row gets its expert's bias row, read from
// the stacked bias matrix [n_expert, len] in its stored dtype (load1 of the dequant snippet).

struct Params {
    n: u32,      // pairs × len
    len: u32,
    row_bytes: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 256u;
    if (i < p.n) {
        y[i] += load1(ids[i / p.len] * p.row_bytes, i % p.len);
    }
}
