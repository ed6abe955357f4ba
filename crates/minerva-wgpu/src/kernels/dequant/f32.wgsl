// F32 rows: `rb` is the row's byte offset (a multiple of 4).
fn load1(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(w[(rb >> 2u) + k]);
}

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = (rb >> 2u) + k;
    return array<f32, 8>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]),
        bitcast<f32>(w[b + 3u]), bitcast<f32>(w[b + 4u]), bitcast<f32>(w[b + 5u]),
        bitcast<f32>(w[b + 6u]), bitcast<f32>(w[b + 7u]));
}
