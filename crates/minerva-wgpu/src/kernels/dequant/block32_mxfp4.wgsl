// MXFP4 block32 (see block32_generic.wgsl): the block's 16 quant bytes are one aligned 16-byte
// load from its body, e a byte of its head (layout.rs). E2M1 nibbles become f32 by their
// bits (no table, which would sit in slow per-thread memory): ggml's doubled values are
// 2^e·(1 + m/2) for exponent e > 0 and m for e = 0.
fn e2m1x4(n: vec4<u32>) -> vec4<f32> {
    let e = (n >> vec4<u32>(1u)) & vec4<u32>(3u);
    let m = n & vec4<u32>(1u);
    let normal = ((e + vec4<u32>(127u)) << vec4<u32>(23u)) | (m << vec4<u32>(22u));
    let bits = select(m * 0x3f800000u, normal, e > vec4<u32>(0u));
    return bitcast<vec4<f32>>(bits | ((n & vec4<u32>(8u)) << vec4<u32>(28u)));
}

fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let b = k / 32u;
    let d = e8m0_half(load_u8(head_at(rb, b)));
    let q = quad(body_at(rb, b));
    let lo = q & vec4<u32>(0x0f0f0f0fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    return array<vec4<f32>, 8>(
        d * e2m1x4(unpack4xU8(lo.x)), d * e2m1x4(unpack4xU8(lo.y)),
        d * e2m1x4(unpack4xU8(lo.z)), d * e2m1x4(unpack4xU8(lo.w)),
        d * e2m1x4(unpack4xU8(hi.x)), d * e2m1x4(unpack4xU8(hi.y)),
        d * e2m1x4(unpack4xU8(hi.z)), d * e2m1x4(unpack4xU8(hi.w)));
}
