// Copies this step's keys and values (rows × n_kv·head_dim) into one layer's cache
// (`[slot][kv_head][position][head_dim]`), each row at its (slot, position) from `info`.

struct Params {
    rows: u32,
    n_kv: u32,
    head_dim: u32,
    capacity: u32,
}

@group(0) @binding(0) var<storage, read> k: array<f32>;
@group(0) @binding(1) var<storage, read> v: array<f32>;
@group(0) @binding(2) var<storage, read_write> kc: array<f32>;
@group(0) @binding(3) var<storage, read_write> vc: array<f32>;
@group(0) @binding(4) var<storage, read> info: array<vec2<u32>>; // (slot, position) per row
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let kv_dim = p.n_kv * p.head_dim;
    let i = gid.x + gid.y * 65535u * 64u;
    if (i >= p.rows * kv_dim) {
        return;
    }
    let r = i / kv_dim;
    let h = (i % kv_dim) / p.head_dim;
    let d = i % p.head_dim;
    let at = ((info[r].x * p.n_kv + h) * p.capacity + info[r].y) * p.head_dim + d;
    kc[at] = k[i];
    vc[at] = v[i];
}
