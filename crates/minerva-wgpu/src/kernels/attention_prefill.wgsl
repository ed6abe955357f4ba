// Prefill attention, tiled with an online softmax. One workgroup per (block of up to QB query
// rows of one sequence, head): the block's queries sit in workgroup memory; the keys and values
// the block can see are walked in tiles of KT positions, each tile loaded once into workgroup
// memory and used by all QB queries (the reuse a per-query kernel lacks). Four threads per query
// each own every fourth head dim of its accumulator. Masks (causal, sliding window) are applied
// per query from its own position. With `has_sinks`, head h's sink logit sinks[h] (GPT-OSS) joins
// every softmax as one more score that attends to nothing: only the final normalisation changes.

struct Params {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    window: u32,     // 0: causal
    scale: f32,
    has_sinks: u32,  // 1: sinks[h] joins every softmax of head h
    block_size: u32,
    per_slot: u32,   // block-table entries per slot
    blocks: u32,     // blocks in the pool
    _pad: u32,
}

struct Block {
    first_row: u32,
    rows: u32,
    slot: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<KV>;
@group(0) @binding(2) var<storage, read> vc: array<KV>;
@group(0) @binding(3) var<storage, read> info: array<vec2<u32>>; // (slot, position) per row
@group(0) @binding(4) var<storage, read> blocks: array<Block>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read> sinks: array<f32>;
@group(0) @binding(7) var<storage, read> tables: array<u32>; // per_slot block ids per slot
@group(0) @binding(8) var<uniform> p: Params;

// Element offset of position `pos` of `slot` for KV head `kvh`: through the slot's block table,
// in a layer laid out `[kv_head][block][position in block][head_dim]`.
fn kv_off(slot: u32, kvh: u32, pos: u32) -> u32 {
    let block = tables[slot * p.per_slot + pos / p.block_size];
    return ((kvh * p.blocks + block) * p.block_size + pos % p.block_size) * p.head_dim;
}

const QB: u32 = 16u;
const KT: u32 = 16u;
const MAX_HD: u32 = 128u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<f32, 2048>;   // QB × MAX_HD
// Keys at a row stride of hd + 1: the 16 keys a warp's score loop reads at once then fall in 16
// banks, where a stride of hd (a multiple of 32 words) puts them all in one.
var<workgroup> ks: array<f32, 2064>;   // KT × (MAX_HD + 1)
var<workgroup> vs: array<f32, 2048>;   // KT × MAX_HD
var<workgroup> sc: array<f32, 256>;    // QB × KT

fn lo_of(pos: u32) -> u32 {
    if (p.window > 0u && pos + 1u > p.window) {
        return pos + 1u - p.window;
    }
    return 0u;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let blk = blocks[wid.x];
    let h = wid.y;
    let hd = p.head_dim;
    let kvh = h / (p.n_head / p.n_kv);
    // The key range any query of the block sees.
    var k_lo = 0xffffffffu;
    var k_hi = 0u;
    for (var i = 0u; i < blk.rows; i++) {
        let pos = info[blk.first_row + i].y;
        k_lo = min(k_lo, lo_of(pos));
        k_hi = max(k_hi, pos + 1u);
    }
    for (var i = lid.x; i < QB * hd; i += 64u) {
        let r = i / hd;
        if (r < blk.rows) {
            qs[i] = q[((blk.first_row + r) * p.n_head + h) * hd + i % hd];
        }
    }
    let qi = lid.x / 4u;      // this thread's query in the block
    let sub = lid.x % 4u;     // its share of the head dims: sub, sub + 4, …
    let live = qi < blk.rows;
    var my_pos = 0u;
    if (live) {
        my_pos = info[blk.first_row + qi].y;
    }
    let my_lo = lo_of(my_pos);
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, 32>;
    for (var t = k_lo; t < k_hi; t += KT) {
        let n = min(KT, k_hi - t);
        workgroupBarrier();
        for (var i = lid.x; i < n * hd; i += 64u) {
            let at = kv_off(blk.slot, kvh, t + i / hd) + i % hd;
            ks[(i / hd) * (hd + 1u) + i % hd] = k_at(at);
            vs[i] = v_at(at);
        }
        workgroupBarrier();
        // 256 (query, key) scores, 4 per thread.
        for (var s = lid.x; s < QB * KT; s += 64u) {
            let a = s / KT;
            let b = s % KT;
            var v = NEG;
            if (a < blk.rows && b < n) {
                let pos = info[blk.first_row + a].y;
                let key = t + b;
                if (key <= pos && key >= lo_of(pos)) {
                    var d = 0.0;
                    for (var i = 0u; i < hd; i++) {
                        d += qs[a * hd + i] * ks[b * (hd + 1u) + i];
                    }
                    v = d * p.scale;
                }
            }
            sc[s] = v;
        }
        workgroupBarrier();
        if (live) {
            var m_new = m;
            for (var b = 0u; b < n; b++) {
                m_new = max(m_new, sc[qi * KT + b]);
            }
            let alpha = exp(m - m_new);
            l *= alpha;
            for (var j = 0u; j < 32u; j++) {
                acc[j] *= alpha;
            }
            for (var b = 0u; b < n; b++) {
                let key = t + b;
                if (key <= my_pos && key >= my_lo) {
                    let e = exp(sc[qi * KT + b] - m_new);
                    l += e;
                    for (var j = 0u; j < 32u; j++) {
                        let d = sub + 4u * j;
                        if (d < hd) {
                            acc[j] += e * vs[b * hd + d];
                        }
                    }
                }
            }
            m = m_new;
        }
    }
    if (live) {
        // The sink as one more score: rescale to the new maximum, add its weight to the total.
        var scale = 1.0;
        if (p.has_sinks != 0u) {
            let s = sinks[h];
            let m_new = max(m, s);
            scale = exp(m - m_new);
            l = l * scale + exp(s - m_new);
        }
        let o = ((blk.first_row + qi) * p.n_head + h) * hd;
        for (var j = 0u; j < 32u; j++) {
            let d = sub + 4u * j;
            if (d < hd) {
                out[o + d] = acc[j] * scale / l;
            }
        }
    }
}
