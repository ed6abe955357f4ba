// kv_store with the step's RoPE folded in (the deferred rotations of Q and K): keys are rotated as
// they are stored, and the threads past the last stored value rotate Q in place. Both exactly as
// rope.wgsl rotates them (the same table, pairs and expressions: Q by rope_pair.wgsl), so the cache and Q hold the
// values the separate kernels would write.

@group(0) @binding(6) var<storage, read_write> rope_x: array<f32>; // Q
@group(0) @binding(7) var<storage, read> cs: array<vec2<f32>>;

// Key value `i` (row r, kv head, dim d) rotated: normal pairs (2j, 2j + 1), NeoX (j, j + half);
// dims from 2 · half on are not rotated.
fn k_at(i: u32) -> f32 {
    let d = i % p.head_dim;
    let r = i / (p.n_kv * p.head_dim);
    let base = i - d;
    if (d >= 2u * p.half) {
        return k[i];
    }
    var j = d / 2u;
    var a = base + 2u * j;
    var b = a + 1u;
    var first = d % 2u == 0u;
    if (p.neox != 0u) {
        j = d % p.half;
        a = base + j;
        b = a + p.half;
        first = d < p.half;
    }
    let c = cs[r * p.half + j];
    let x0 = k[a];
    let x1 = k[b];
    if (first) {
        return x0 * c.x - x1 * c.y;
    }
    return x0 * c.y + x1 * c.x;
}

// Q's pair `idx` (row, head, pair) rotated in place.
fn after_store(idx: u32) {
    rotate_pair(idx, p.rows, p.n_head, p.head_dim, p.half, p.neox != 0u);
}
