// Flash-decoding, second pass: merges the splits' (m, l, acc) of one (query row, head) into
// out = Σ acc_s e^(m_s - M) / Σ l_s e^(m_s - M), M = max m_s. Empty splits have l = 0, acc = 0.
// With `has_sinks`, head h's sink logit joins as one more split with l = 1 and acc = 0.

struct Params {
    n_head: u32,
    head_dim: u32,
    n_splits: u32,
    has_sinks: u32,
}

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> sinks: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wid.x;
    let r = wid.y;
    let hd = p.head_dim;
    let base = (r * p.n_head + h) * p.n_splits * (hd + 2u);
    var big = -3.0e38;
    if (p.has_sinks != 0u) {
        big = sinks[h];
    }
    for (var s = 0u; s < p.n_splits; s++) {
        big = max(big, part[base + s * (hd + 2u)]);
    }
    var total = 0.0;
    if (p.has_sinks != 0u) {
        total = exp(sinks[h] - big);
    }
    for (var s = 0u; s < p.n_splits; s++) {
        let o = base + s * (hd + 2u);
        total += part[o + 1u] * exp(part[o] - big);
    }
    for (var d = lid.x; d < hd; d += 64u) {
        var v = 0.0;
        for (var s = 0u; s < p.n_splits; s++) {
            let o = base + s * (hd + 2u);
            v += part[o + 2u + d] * exp(part[o] - big);
        }
        out[(r * p.n_head + h) * hd + d] = v / total;
    }
}
