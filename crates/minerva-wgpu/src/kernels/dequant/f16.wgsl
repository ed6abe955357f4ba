// F16 rows: `rb` is the row's byte offset (even).
fn load1(rb: u32, k: u32) -> f32 {
    return f16_at(rb + 2u * k);
}

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = f16_at(rb + 2u * (k + i));
    }
    return v;
}
