// The KV cache as f16 pairs: element i is half (i & 1) of word i / 2 (`pack2x16float`), so the
// kernels need no `shader-f16` support.

alias KV = u32;

fn k_at(i: u32) -> f32 {
    return unpack2x16float(kc[i >> 1u])[i & 1u];
}

fn v_at(i: u32) -> f32 {
    return unpack2x16float(vc[i >> 1u])[i & 1u];
}

// Keys i and i + 1 (i even: one word).
fn k_pair(i: u32) -> vec2<f32> {
    return unpack2x16float(kc[i >> 1u]);
}
