// The KV cache as f32: one value per element of `kc` / `vc`.

alias KV = f32;

fn k_at(i: u32) -> f32 {
    return kc[i];
}

fn v_at(i: u32) -> f32 {
    return vc[i];
}

// Keys i and i + 1.
fn k_pair(i: u32) -> vec2<f32> {
    return vec2<f32>(kc[i], kc[i + 1u]);
}
