// Sampling one token per row on the device, the chain of minerva-generate's sampler after bias and
// penalties (sample_adjust.wgsl): top-k, top-p at temperature 1, min-p, temperature, softmax, and
// the first candidate whose running probability exceeds the row's draw u. One workgroup per row.
//
// top-k without sorting the vocabulary: logits map to u32 keys that order as the floats do; four
// passes of an 8-bit radix histogram find the k-th largest key T. The keys above T, and the
// lowest-id ties at T (the sampler breaks ties by id), are gathered into workgroup memory, sorted
// there (bitonic, by key descending then id), and the rest of the chain runs over at most 256
// candidates. Logits that are -inf or NaN are never candidates; a row without any gives id 0, the
// host sampler's argmax of such a row.

struct Params {
    vocab: u32,
    rows: u32,
}

struct RowParams {
    temperature: f32,
    top_k: u32,
    top_p: f32,
    min_p: f32,
    repeat: f32,
    frequency: f32,
    presence: f32,
    u: f32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> rows: array<RowParams>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 256u;

var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> n_valid: atomic<u32>;
var<workgroup> n_above: atomic<u32>;
var<workgroup> prefix: u32;
var<workgroup> remaining: u32;
var<workgroup> ties_before: array<u32, 256>;
var<workgroup> cand_key: array<u32, 256>;
var<workgroup> cand_id: array<u32, 256>;

// A key that orders as the float does (larger float, larger key).
fn key_of(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    if ((b >> 31u) == 1u) {
        return ~b;
    }
    return b | 0x80000000u;
}

fn float_of(key: u32) -> f32 {
    if ((key >> 31u) == 1u) {
        return bitcast<f32>(key & 0x7fffffffu);
    }
    return bitcast<f32>(~key);
}

fn is_candidate(f: f32) -> bool {
    // Not -inf, and not NaN (every comparison with it is false).
    return f >= -3.402823466e38;
}

// Whether candidate a comes before candidate b: larger logit first, then lower id.
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let row = wid.x;
    let base = row * p.vocab;
    let rp = rows[row];
    atomicStore(&hist[lid], 0u);
    if (lid == 0u) {
        atomicStore(&n_valid, 0u);
        atomicStore(&n_above, 0u);
        prefix = 0u;
    }
    workgroupBarrier();
    var mine = 0u;
    for (var i = lid; i < p.vocab; i += WG) {
        if (is_candidate(logits[base + i])) {
            mine += 1u;
        }
    }
    atomicAdd(&n_valid, mine);
    workgroupBarrier();
    if (lid == 0u) {
        remaining = min(max(rp.top_k, 1u), min(atomicLoad(&n_valid), WG));
    }
    let k = workgroupUniformLoad(&remaining);
    if (k == 0u) {
        if (lid == 0u) {
            out[row] = 0u;
        }
        return;
    }
    // The k-th largest key, 8 bits at a time from the top.
    var mask = 0u;
    for (var round = 0u; round < 4u; round++) {
        let shift = 24u - 8u * round;
        let want = workgroupUniformLoad(&prefix);
        atomicStore(&hist[lid], 0u);
        workgroupBarrier();
        for (var i = lid; i < p.vocab; i += WG) {
            let f = logits[base + i];
            let key = key_of(f);
            if (is_candidate(f) && (key & mask) == want) {
                atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            var above = 0u;
            var digit = 255u;
            loop {
                let c = atomicLoad(&hist[digit]);
                if (above + c >= remaining || digit == 0u) {
                    break;
                }
                above += c;
                digit -= 1u;
            }
            remaining -= above;
            prefix = want | (digit << shift);
        }
        mask |= 255u << shift;
        workgroupBarrier();
    }
    let threshold = workgroupUniformLoad(&prefix);
    let ties = workgroupUniformLoad(&remaining);
    // Keys above the threshold, in any order; then the `ties` lowest-id keys equal to it, each
    // thread taking a contiguous range of ids so that a prefix sum orders them by id.
    for (var i = lid; i < p.vocab; i += WG) {
        let f = logits[base + i];
        if (is_candidate(f) && key_of(f) > threshold) {
            let slot = atomicAdd(&n_above, 1u);
            cand_key[slot] = key_of(f);
            cand_id[slot] = i;
        }
    }
    let chunk = (p.vocab + WG - 1u) / WG;
    let lo = min(lid * chunk, p.vocab);
    let hi = min(lo + chunk, p.vocab);
    var my_ties = 0u;
    for (var i = lo; i < hi; i++) {
        let f = logits[base + i];
        if (is_candidate(f) && key_of(f) == threshold) {
            my_ties += 1u;
        }
    }
    ties_before[lid] = my_ties;
    workgroupBarrier();
    if (lid == 0u) {
        var sum = 0u;
        for (var t = 0u; t < WG; t++) {
            let c = ties_before[t];
            ties_before[t] = sum;
            sum += c;
        }
    }
    workgroupBarrier();
    let above = k - ties;
    var tie = ties_before[lid];
    for (var i = lo; i < hi && tie < ties; i++) {
        let f = logits[base + i];
        if (is_candidate(f) && key_of(f) == threshold) {
            cand_key[above + tie] = threshold;
            cand_id[above + tie] = i;
            tie += 1u;
        }
    }
    workgroupBarrier();
    if (lid >= k) {
        cand_key[lid] = 0u;
        cand_id[lid] = 0xffffffffu;
    }
    workgroupBarrier();
    // Bitonic sort of the 256 slots (padding sorts last).
    for (var size = 2u; size <= WG; size *= 2u) {
        for (var stride = size / 2u; stride > 0u; stride /= 2u) {
            let j = lid ^ stride;
            if (j > lid) {
                let ka = cand_key[lid];
                let ia = cand_id[lid];
                let kb = cand_key[j];
                let ib = cand_id[j];
                let first = (lid & size) == 0u;
                if (first != before(ka, ia, kb, ib)) {
                    cand_key[lid] = kb;
                    cand_id[lid] = ib;
                    cand_key[j] = ka;
                    cand_id[j] = ia;
                }
            }
            workgroupBarrier();
        }
    }
    if (lid != 0u) {
        return;
    }
    var n = k;
    let top = float_of(cand_key[0]);
    if (rp.top_p < 1.0) {
        var total = 0.0;
        for (var i = 0u; i < n; i++) {
            total += exp(float_of(cand_key[i]) - top);
        }
        var cum = 0.0;
        for (var i = 0u; i < n; i++) {
            cum += exp(float_of(cand_key[i]) - top);
            if (cum >= rp.top_p * total) {
                n = i + 1u;
                break;
            }
        }
    }
    if (rp.min_p > 0.0) {
        let least = top + log(rp.min_p);
        var kept = 1u;
        while (kept < n && float_of(cand_key[kept]) >= least) {
            kept += 1u;
        }
        n = kept;
    }
    let m = top / rp.temperature;
    var total = 0.0;
    for (var i = 0u; i < n; i++) {
        total += exp(float_of(cand_key[i]) / rp.temperature - m);
    }
    var cum = 0.0;
    var pick = cand_id[n - 1u];
    for (var i = 0u; i < n; i++) {
        cum += exp(float_of(cand_key[i]) / rp.temperature - m) / total;
        if (rp.u < cum) {
            pick = cand_id[i];
            break;
        }
    }
    out[row] = pick;
}
