// Flash-decoding, first pass. One workgroup per (split, head, query row): the row's visible
// positions [lo, pos] (causal, or the last `window`) are cut into splits of `split_len`; this
// workgroup walks its split in tiles of 64 keys with an online softmax (running max m, running
// sum l, rescaled accumulator) and writes (m, l, acc[head_dim]) for attention_reduce to merge.
// Each thread scores one key of a tile, then owns head dims lid, lid + 64, … of the accumulator.

struct Params {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    n_splits: u32,
    split_len: u32,
    window: u32,     // 0: causal
    scale: f32,
    block_size: u32,
    per_slot: u32,   // block-table entries per slot
    blocks: u32,     // blocks in the pool
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<KV>;
@group(0) @binding(2) var<storage, read> vc: array<KV>;
@group(0) @binding(3) var<storage, read> info: array<vec2<u32>>; // (slot, position) per row
@group(0) @binding(4) var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read> tables: array<u32>; // per_slot block ids per slot
@group(0) @binding(6) var<uniform> p: Params;

// Element offset of position `pos` of `slot` for KV head `kvh`: through the slot's block table,
// in a layer laid out `[kv_head][block][position in block][head_dim]`.
fn kv_off(slot: u32, kvh: u32, pos: u32) -> u32 {
    let block = tables[slot * p.per_slot + pos / p.block_size];
    return ((kvh * p.blocks + block) * p.block_size + pos % p.block_size) * p.head_dim;
}

const NEG: f32 = -3.0e38;
const MAX_HD: u32 = 256u;

var<workgroup> qs: array<f32, 256>;
var<workgroup> score: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let split = wid.x;
    let h = wid.y;
    let r = wid.z;
    let hd = p.head_dim;
    let slot = info[r].x;
    let pos = info[r].y;
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    let s0 = lo + split * p.split_len;
    let s1 = min(pos + 1u, s0 + p.split_len);
    let kvh = h / (p.n_head / p.n_kv);
    let qo = (r * p.n_head + h) * hd;
    for (var d = lid.x; d < hd; d += 64u) {
        qs[d] = q[qo + d];
    }
    var m = NEG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    workgroupBarrier();
    for (var t = s0; t < s1; t += 64u) {
        let key = t + lid.x;
        var s = NEG;
        if (key < s1) {
            let ko = kv_off(slot, kvh, key);
            // Pairs of keys: one word each from an f16 cache (the head dim is even there).
            var d2 = vec2<f32>(0.0);
            let even = hd & ~1u;
            for (var d = 0u; d < even; d += 2u) {
                d2 += vec2<f32>(qs[d], qs[d + 1u]) * k_pair(ko + d);
            }
            s = d2.x + d2.y;
            if (even < hd) {
                s += qs[even] * k_at(ko + even);
            }
            s *= p.scale;
        }
        score[lid.x] = s;
        workgroupBarrier();
        let n = min(64u, s1 - t);
        var m_new = m;
        for (var i = 0u; i < n; i++) {
            m_new = max(m_new, score[i]);
        }
        let alpha = exp(m - m_new);
        // Each thread turns its own key's score into its weight once, for all threads to read.
        var e = 0.0;
        if (lid.x < n) {
            e = exp(s - m_new);
        }
        workgroupBarrier();
        score[lid.x] = e;
        workgroupBarrier();
        l *= alpha;
        for (var j = 0u; j < 4u; j++) {
            acc[j] *= alpha;
        }
        // Four keys' values per pass: their loads are in flight together.
        var i = 0u;
        for (; i + 4u <= n; i += 4u) {
            let e4 = vec4<f32>(score[i], score[i + 1u], score[i + 2u], score[i + 3u]);
            l += e4.x + e4.y + e4.z + e4.w;
            let v0 = kv_off(slot, kvh, t + i);
            let v1 = kv_off(slot, kvh, t + i + 1u);
            let v2 = kv_off(slot, kvh, t + i + 2u);
            let v3 = kv_off(slot, kvh, t + i + 3u);
            for (var j = 0u; j < 4u; j++) {
                let d = lid.x + 64u * j;
                if (d < hd) {
                    acc[j] += dot(e4, vec4<f32>(v_at(v0 + d), v_at(v1 + d), v_at(v2 + d), v_at(v3 + d)));
                }
            }
        }
        for (; i < n; i++) {
            let ei = score[i];
            l += ei;
            let vo = kv_off(slot, kvh, t + i);
            for (var j = 0u; j < 4u; j++) {
                let d = lid.x + 64u * j;
                if (d < hd) {
                    acc[j] += ei * v_at(vo + d);
                }
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    let po = ((r * p.n_head + h) * p.n_splits + split) * (hd + 2u);
    if (lid.x == 0u) {
        part[po] = m;
        part[po + 1u] = l;
    }
    for (var j = 0u; j < 4u; j++) {
        let d = lid.x + 64u * j;
        if (d < hd) {
            part[po + 2u + d] = acc[j];
        }
    }
}
