// The host-side part of the sampling chain, on the logits in place: each entry adds its token's
// logit bias, then applies the repetition penalty (divide a positive logit, multiply a negative
// one) and subtracts count · frequency + presence, as minerva-generate's sampler does. One thread
// per entry; a token appears once per row.

struct Params {
    vocab: u32,
    n_adjust: u32,
}

struct Adjust {
    row: u32,
    token: u32,
    count: u32,
    bias: f32,
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

@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@group(0) @binding(1) var<storage, read> adjust: array<Adjust>;
@group(0) @binding(2) var<storage, read> rows: array<RowParams>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= p.n_adjust) {
        return;
    }
    let a = adjust[i];
    if (a.token >= p.vocab) {
        return;
    }
    let at = a.row * p.vocab + a.token;
    var l = logits[at] + a.bias;
    if (a.count > 0u) {
        let r = rows[a.row];
        l = select(l * r.repeat, l / r.repeat, l > 0.0);
        l -= f32(a.count) * r.frequency + r.presence;
    }
    logits[at] = l;
}
