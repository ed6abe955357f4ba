// out[i, :] = dequantized row tokens[i] of the table chunk holding rows [row_start, row_start + rows).
// One workgroup per token; tokens outside this chunk are left for the chunk that holds them.

struct Params {
    cols: u32,
    rows: u32,
    row_start: u32,
    row_bytes: u32,
}

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let tok = tokens[wid.x];
    if (tok < p.row_start || tok >= p.row_start + p.rows) {
        return;
    }
    let rb = (tok - p.row_start) * p.row_bytes;
    let o = wid.x * p.cols;
    let full = p.cols & ~7u;
    for (var c = lid.x * 8u; c < full; c += 512u) {
        var v = load8(rb, c);
        for (var i = 0u; i < 8u; i++) {
            out[o + c + i] = v[i];
        }
    }
    for (var c = full + lid.x; c < p.cols; c += 64u) {
        out[o + c] = load1(rb, c);
    }
}
