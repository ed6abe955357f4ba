//! `rope.wgsl`: rotary position embedding in place, from a host-computed (cos, sin) table.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// The rotation's shape.
#[derive(Clone, Debug)]
pub(crate) struct RopeShape {
    pub rows: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub half: usize,
    pub neox: bool,
}

/// Records the rotation of `x` by table `cs` (`rows × half` pairs of (cos, sin)).
pub(crate) fn rope(gpu: &Gpu, x: &wgpu::Buffer, cs: &wgpu::Buffer, s: &RopeShape) {
    let params = [s.rows as u32, s.n_heads as u32, s.head_dim as u32, s.half as u32, u32::from(s.neox), 0, 0, 0];
    let threads = (s.rows * s.n_heads * s.half) as u32;
    gpu.dispatch(
        PipelineKey::named("rope"),
        || concat!(include_str!("rope_pair.wgsl"), include_str!("rope.wgsl")).to_string(),
        &[x, cs],
        &params,
        groups_1d(threads.div_ceil(64)),
    );
    // Each rotated pair read and written, its (cos, sin) read.
    gpu.moved(u64::from(threads) * 24);
}
