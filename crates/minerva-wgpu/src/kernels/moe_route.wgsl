// Mixture-of-experts routing: for each row of router logits, the top k experts (ties to the
// lower index, as a stable sort would) and the softmax over those k logits.
//
//   logits [rows × n_expert]  ->  ids [rows × k] (u32), weights [rows × k] (f32)
//
// One thread per row: k and n_expert are small (4 of 32 for GPT-OSS-20B), so k selection passes
// over the logits cost less than a sort. The experts already picked are a bit mask in registers
// (at most 256 experts, checked by the caller) and the picked logits stay in registers until
// the softmax: nothing written is read back from memory.

struct Params {
    rows: u32,
    n_expert: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> weights: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const NONE: u32 = 0xffffffffu;

const MAX_K: u32 = 32u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x + gid.y * 65535u * 64u;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.n_expert;
    let out = r * p.k;
    var taken: array<u32, 8>;
    var picked: array<f32, MAX_K>;
    for (var j = 0u; j < p.k; j++) {
        var best = NONE;
        var best_v = 0.0;
        for (var e = 0u; e < p.n_expert; e++) {
            let v = logits[base + e];
            let free = (taken[e / 32u] & (1u << (e % 32u))) == 0u;
            if (free && (best == NONE || v > best_v)) {
                best = e;
                best_v = v;
            }
        }
        taken[best / 32u] |= 1u << (best % 32u);
        ids[out + j] = best;
        picked[j] = best_v;
    }
    // Softmax over the k picked logits; the first is the largest.
    let top = picked[0];
    var total = 0.0;
    for (var j = 0u; j < p.k; j++) {
        picked[j] = exp(picked[j] - top);
        total += picked[j];
    }
    for (var j = 0u; j < p.k; j++) {
        weights[out + j] = picked[j] / total;
    }
}
