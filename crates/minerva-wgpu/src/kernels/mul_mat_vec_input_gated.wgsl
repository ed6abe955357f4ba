// mul_mat_vec's input: a gated product of gate (x4) and up, `glu(gate, up)` from
// mul_mat_vec_glu_{silu,gelu}.wgsl, computed once per workgroup and pass (256 vec4s of columns
// per activation row) into workgroup memory.

@group(0) @binding(3) var<storage, read> up4: array<vec4<f32>>;

var<workgroup> staged: array<vec4<f32>, NT * 256u>;

fn prepare(t0: u32, li: u32) {}

// The gated values of vec4 columns k0 / 4 .. + 256 of the workgroup's activation rows.
fn stage(k0: u32, t0: u32, li: u32) {
    let c4 = p.cols / 4u;
    let k4 = k0 / 4u + li;
    for (var t = 0u; t < NT; t++) {
        if (t0 + t < p.n_tok && k4 < c4) {
            let i = (t0 + t) * c4 + k4;
            staged[t * 256u + li] = glu(x4[i], up4[i]);
        }
    }
}

// Input vec4 `i` (row-major over the activation rows) of the workgroup's row `t`, from this pass.
fn xin(t: u32, i: u32) -> vec4<f32> {
    return staged[t * 256u + (i % (p.cols / 4u)) % 256u];
}
