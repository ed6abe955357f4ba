// Q8_0 block32 (see block32_generic.wgsl): the block's 32 quant bytes are two aligned 16-byte
// loads from its body, d a half-word of its head (layout.rs); y = d·q.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let b = k / 32u;
    let d = f16_at(head_at(rb, b));
    let body = body_at(rb, b);
    let qa = quad(body);
    let qb = quad(body + 16u);
    return array<vec4<f32>, 8>(
        d * vec4<f32>(unpack4xI8(qa.x)), d * vec4<f32>(unpack4xI8(qa.y)),
        d * vec4<f32>(unpack4xI8(qa.z)), d * vec4<f32>(unpack4xI8(qa.w)),
        d * vec4<f32>(unpack4xI8(qb.x)), d * vec4<f32>(unpack4xI8(qb.y)),
        d * vec4<f32>(unpack4xI8(qb.z)), d * vec4<f32>(unpack4xI8(qb.w)));
}
