// Copies this step's keys and values (rows × n_kv·head_dim) into one layer's cache
// (`[kv_head][block][position in block][head_dim]`), each row at its (slot, position) from `info`, found
// through the slot's block table. The keys are read through `k_at` (kv_store_plain.wgsl, or
// kv_store_rope.wgsl: rotated as they are stored); threads past the last value run `after_store`.

struct Params {
    rows: u32,
    n_kv: u32,
    head_dim: u32,
    block_size: u32,
    per_slot: u32,   // block-table entries per slot
    blocks: u32,     // blocks in the pool
    n_head: u32,     // query heads (kv_store_rope.wgsl)
    half: u32,       // rotated pairs per head (kv_store_rope.wgsl)
    neox: u32,       // NeoX pairs (kv_store_rope.wgsl)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> k: array<f32>;
@group(0) @binding(1) var<storage, read> v: array<f32>;
@group(0) @binding(2) var<storage, read_write> kc: array<f32>;
@group(0) @binding(3) var<storage, read_write> vc: array<f32>;
@group(0) @binding(4) var<storage, read> info: array<vec2<u32>>; // (slot, position) per row
@group(0) @binding(5) var<storage, read> tables: array<u32>; // per_slot block ids per slot
@group(0) @binding({{PARAMS_BINDING}}) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let kv_dim = p.n_kv * p.head_dim;
    let i = gid.x + gid.y * 65535u * 64u;
    if (i >= p.rows * kv_dim) {
        after_store(i - p.rows * kv_dim);
        return;
    }
    let r = i / kv_dim;
    let h = (i % kv_dim) / p.head_dim;
    let d = i % p.head_dim;
    let pos = info[r].y;
    let block = tables[info[r].x * p.per_slot + pos / p.block_size];
    let at = ((h * p.blocks + block) * p.block_size + pos % p.block_size) * p.head_dim + d;
    kc[at] = k_at(i);
    vc[at] = v[i];
}
