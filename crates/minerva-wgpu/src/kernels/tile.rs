//! The shared-memory tile of the tiled matrix kernels (`tile.wgsl`): its shapes, and which one a
//! product runs with on a device.

/// Columns per step of a tile (`BK` in tile.wgsl).
const STEP_COLUMNS: usize = 32;

/// Workgroups a tiled product should dispatch at least, where a larger tile would leave fewer:
/// on a GPU enough to give each of a large card's compute units one (an H200 has 132 SMs); on a
/// CPU adapter (lavapipe), whose workgroups run on the host's few cores, a few. A heuristic, not
/// yet measured on a GPU (docs/wgpu.md).
const GPU_WORKGROUPS: usize = 128;
const CPU_WORKGROUPS: usize = 4;

/// A tile of the tiled matrix kernels: 256 threads, each computing a block of weight rows ×
/// activation rows; larger tiles dequantize each weight once for more activation rows and do
/// more FMAs per read of workgroup memory, but need more workgroup memory and make fewer
/// workgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileShape {
    /// 64 weight rows × 64 activation rows, 4 × 4 per thread: 16 KiB, WebGPU's guaranteed minimum.
    Rows64Acts64,
    /// 128 × 64, 8 × 4 per thread: 24 KiB.
    Rows128Acts64,
    /// 128 × 128, 8 × 8 per thread: 32 KiB.
    Rows128Acts128,
}

impl TileShape {
    /// Every shape, smallest first.
    pub const ALL: [TileShape; 3] = [TileShape::Rows64Acts64, TileShape::Rows128Acts64, TileShape::Rows128Acts128];

    /// (weight rows, activation rows) each thread computes (`TM`, `TN`).
    fn per_thread(self) -> (usize, usize) {
        match self {
            TileShape::Rows64Acts64 => (4, 4),
            TileShape::Rows128Acts64 => (8, 4),
            TileShape::Rows128Acts128 => (8, 8),
        }
    }

    /// Weight rows per tile (`BM`).
    pub fn rows(self) -> usize {
        16 * self.per_thread().0
    }

    /// Activation rows per tile (`BN`).
    pub fn acts(self) -> usize {
        16 * self.per_thread().1
    }

    /// Workgroup memory of the weight and activation tiles.
    pub fn tile_bytes(self) -> usize {
        (self.rows() + self.acts()) * STEP_COLUMNS * 4
    }

    /// The name in pipeline keys and profiles.
    pub fn name(self) -> &'static str {
        match self {
            TileShape::Rows64Acts64 => "64x64",
            TileShape::Rows128Acts64 => "128x64",
            TileShape::Rows128Acts128 => "128x128",
        }
    }

    /// `tile.wgsl` for this shape.
    pub(crate) fn wgsl(self) -> String {
        let (tm, tn) = self.per_thread();
        include_str!("tile.wgsl").replace("{{TM}}", &tm.to_string()).replace("{{TN}}", &tn.to_string())
    }
}

impl std::fmt::Display for TileShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a device picks tiles ([`crate::WgpuOptions::tile`]): one shape for every product, or by
/// the adapter's workgroup memory and the product's size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TilePlan {
    /// The shape asked for; `None`: chosen per product.
    pub fixed: Option<TileShape>,
    /// The adapter's workgroup memory (`max_compute_workgroup_storage_size`).
    pub workgroup_bytes: usize,
    /// Workgroups a product should make at least (a larger tile is taken only while it does).
    pub min_workgroups: usize,
}

impl TilePlan {
    pub(crate) fn new(fixed: Option<TileShape>, workgroup_bytes: usize, on_cpu: bool) -> TilePlan {
        let min_workgroups = if on_cpu { CPU_WORKGROUPS } else { GPU_WORKGROUPS };
        TilePlan { fixed, workgroup_bytes, min_workgroups }
    }

    /// The tile for a product of `rows` weight rows with `acts` activation rows, in a kernel that
    /// declares `extra(shape)` bytes of workgroup memory besides the tiles: the fixed shape if it
    /// fits, else the largest fitting shape that still makes `min_workgroups` workgroups, else the
    /// smallest fitting one; `None` when none fits (the kernel's untiled form runs instead).
    pub(crate) fn pick(&self, rows: usize, acts: usize, extra: impl Fn(TileShape) -> usize) -> Option<TileShape> {
        let fits = |s: &TileShape| s.tile_bytes() + extra(*s) <= self.workgroup_bytes;
        if let Some(shape) = self.fixed {
            return fits(&shape).then_some(shape);
        }
        let mut fitting = TileShape::ALL.into_iter().filter(fits);
        let smallest = fitting.next()?;
        let workgroups = |s: TileShape| rows.div_ceil(s.rows()) * acts.div_ceil(s.acts());
        let larger = TileShape::ALL.into_iter().filter(fits).rev().find(|&s| workgroups(s) >= self.min_workgroups);
        Some(larger.unwrap_or(smallest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_follow_the_workgroup_memory_and_the_product_size() {
        let gpu = TilePlan::new(None, 48 << 10, false);
        // Llama 8B's prefill of 512: 32 × 4 tiles of 128 × 128 fill 128 workgroups.
        assert_eq!(gpu.pick(4096, 512, |_| 0), Some(TileShape::Rows128Acts128));
        // A small model's prefill keeps the many small tiles.
        assert_eq!(gpu.pick(576, 512, |_| 0), Some(TileShape::Rows64Acts64));
        assert_eq!(gpu.pick(8192, 128, |_| 0), Some(TileShape::Rows128Acts64));
        assert_eq!(gpu.pick(14336, 64, |_| 0), Some(TileShape::Rows64Acts64));
        // WebGPU's minimum of 16 KiB: only the smallest, and nothing for a kernel needing more.
        let minimal = TilePlan::new(None, 16 << 10, false);
        assert_eq!(minimal.pick(4096, 512, |_| 0), Some(TileShape::Rows64Acts64));
        assert_eq!(minimal.pick(4096, 512, |_| 4), None);
        // Lavapipe's 32 KiB: the largest tile only without extra workgroup memory.
        let lavapipe = TilePlan::new(None, 32 << 10, true);
        assert_eq!(lavapipe.pick(4096, 512, |_| 0), Some(TileShape::Rows128Acts128));
        assert_eq!(lavapipe.pick(4096, 512, |s| 1024 + 4 * s.acts()), Some(TileShape::Rows128Acts64));
        // A fixed shape, when it fits.
        let fixed = TilePlan::new(Some(TileShape::Rows128Acts128), 32 << 10, true);
        assert_eq!(fixed.pick(70, 70, |_| 0), Some(TileShape::Rows128Acts128));
        assert_eq!(fixed.pick(70, 70, |_| 4), None);
    }
}
