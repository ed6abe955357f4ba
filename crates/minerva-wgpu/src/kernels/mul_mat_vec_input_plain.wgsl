// mul_mat_vec's input as stored: x4's vec4 `i` (activation row `t` of the workgroup's).

fn prepare(t0: u32, li: u32) {}

fn stage(k0: u32, t0: u32, li: u32) {}

fn xin(t: u32, i: u32) -> vec4<f32> {
    return x4[i];
}
