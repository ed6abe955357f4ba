// Mixture-of-experts routing: for each row of router logits, the top k experts (ties to the
// lower index, as a stable sort would) and the softmax over those k logits.
//
//   logits [rows × n_expert]  ->  ids [rows × k] (u32), weights [rows × k] (f32)
//
// One thread per row: k and n_expert are small (4 of 32 for GPT-OSS-20B), so k selection passes
// over the logits cost less than a sort.

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

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x + gid.y * 65535u * 64u;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.n_expert;
    let out = r * p.k;
    for (var j = 0u; j < p.k; j++) {
        var best = NONE;
        var best_v = 0.0;
        for (var e = 0u; e < p.n_expert; e++) {
            var taken = false;
            for (var i = 0u; i < j; i++) {
                taken = taken || ids[out + i] == e;
            }
            let v = logits[base + e];
            if (!taken && (best == NONE || v > best_v)) {
                best = e;
                best_v = v;
            }
        }
        ids[out + j] = best;
        weights[out + j] = best_v;
    }
    // Softmax over the k picked logits; the first is the largest.
    let top = weights[out];
    var total = 0.0;
    for (var j = 0u; j < p.k; j++) {
        let e = exp(weights[out + j] - top);
        weights[out + j] = e;
        total += e;
    }
    for (var j = 0u; j < p.k; j++) {
        weights[out + j] /= total;
    }
}
