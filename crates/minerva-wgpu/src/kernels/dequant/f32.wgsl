// F32 rows: `rb` is the row's byte offset (a multiple of 4).
fn load1(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(word((rb >> 2u) + k));
}

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = (rb >> 2u) + k;
    return array<f32, 8>(bitcast<f32>(word(b)), bitcast<f32>(word(b + 1u)), bitcast<f32>(word(b + 2u)),
        bitcast<f32>(word(b + 3u)), bitcast<f32>(word(b + 4u)), bitcast<f32>(word(b + 5u)),
        bitcast<f32>(word(b + 6u)), bitcast<f32>(word(b + 7u)));
}
