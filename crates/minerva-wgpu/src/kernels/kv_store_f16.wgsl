// Copies this step's keys and values (rows × n_kv·head_dim) into one layer of an f16 cache
// (`[kv_head][block][position in block][head_dim]`, two values per u32), each row at its (slot, position)
// from `info` through the slot's block table. One thread per pair of values: head_dim is even, so a pair never crosses a head.

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
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;
@group(0) @binding(3) var<storage, read_write> vc: array<u32>;
@group(0) @binding(4) var<storage, read> info: array<vec2<u32>>; // (slot, position) per row
@group(0) @binding(5) var<storage, read> tables: array<u32>; // per_slot block ids per slot
@group(0) @binding({{PARAMS_BINDING}}) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let kv_dim = p.n_kv * p.head_dim;
    let thread = gid.x + gid.y * 65535u * 64u;
    let i = 2u * thread;
    if (i >= p.rows * kv_dim) {
        after_store(thread - p.rows * kv_dim / 2u);
        return;
    }
    let r = i / kv_dim;
    let h = (i % kv_dim) / p.head_dim;
    let d = i % p.head_dim;
    let pos = info[r].y;
    let block = tables[info[r].x * p.per_slot + pos / p.block_size];
    let at = ((h * p.blocks + block) * p.block_size + pos % p.block_size) * p.head_dim + d;
    kc[at / 2u] = pack2x16float(vec2<f32>(k_at(i), k_at(i + 1u)));
    vc[at / 2u] = pack2x16float(vec2<f32>(v[i], v[i + 1u]));
}
