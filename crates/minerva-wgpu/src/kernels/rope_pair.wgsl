// One rotary pair rotated in place, shared by rope.wgsl and kv_store_rope.wgsl: pair `idx` of
// (row, head, pair) of `rope_x` (rows × n_heads × head_dim) by the host's (cos, sin) table `cs`
// (`cs[row * half + i]`, the f32 values the CPU backend uses). Normal pairs (2i, 2i + 1), NeoX
// pairs (i, i + half); indices past the last pair do nothing.
fn rotate_pair(idx: u32, rows: u32, n_heads: u32, head_dim: u32, half: u32, neox: bool) {
    let per_row = n_heads * half;
    if (idx >= rows * per_row) {
        return;
    }
    let r = idx / per_row;
    let h = (idx % per_row) / half;
    let i = idx % half;
    var a = 2u * i;
    var b = 2u * i + 1u;
    if (neox) {
        a = i;
        b = i + half;
    }
    let base = (r * n_heads + h) * head_dim;
    let c = cs[r * half + i];
    let x0 = rope_x[base + a];
    let x1 = rope_x[base + b];
    rope_x[base + a] = x0 * c.x - x1 * c.y;
    rope_x[base + b] = x0 * c.y + x1 * c.x;
}
