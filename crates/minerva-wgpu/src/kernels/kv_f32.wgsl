// The KV cache as f32: one value per element of `kc` / `vc`.

alias KV = f32;

fn k_at(i: u32) -> f32 {
    return kc[i];
}

fn v_at(i: u32) -> f32 {
    return vc[i];
}
