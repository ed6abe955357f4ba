//! What every backend checks before it runs an op, and the tables every backend computes the
//! same way: written once here so that the CPU backend and minerva-wgpu refuse the same operands
//! with the same message, and rotate by the same cos/sin.

use crate::backend::{Batch, CacheShape, MoeParams};
use crate::error::{ModelError, Result};
use crate::rope::{self, RopeConfig};

/// An op's operands that do not fit together.
pub fn operands(op: &'static str, message: String) -> ModelError {
    ModelError::BadOperands { op, message }
}

/// [`crate::Backend::copy_blocks`]'s operands: every block inside the pool.
pub fn copy_blocks(shape: &CacheShape, pairs: &[(u32, u32)]) -> Result<()> {
    if let Some(&(from, to)) = pairs.iter().find(|&&(from, to)| from.max(to) as usize >= shape.blocks) {
        return Err(operands("copy_blocks", format!("blocks {from} → {to} in a pool of {}", shape.blocks)));
    }
    Ok(())
}

/// A weight tensor's shape read as a matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixShape {
    /// Rows: 1 for a vector, every expert's rows for stacked experts.
    pub rows: usize,
    /// Values per row.
    pub cols: usize,
    /// Rows per expert for stacked experts (`[experts, rows, cols]`), else 1: a backend that
    /// splits a matrix may split it only between experts.
    pub whole_rows: usize,
    /// Whether the tensor is a vector (`[cols]`).
    pub vector: bool,
}

impl MatrixShape {
    /// `[cols]` is a vector (1 × cols), `[rows, cols]` a matrix, `[experts, rows, cols]` stacked
    /// experts: one matrix of every expert's rows, expert `e`'s a contiguous run.
    pub fn of(tensor: &str, shape: &[usize]) -> Result<MatrixShape> {
        let (rows, cols, whole_rows) = match shape {
            [cols] => (1, *cols, 1),
            [rows, cols] => (*rows, *cols, 1),
            [experts, rows, cols] => (experts * rows, *cols, (*rows).max(1)),
            _ => {
                return Err(ModelError::TensorShape {
                    tensor: tensor.to_string(),
                    expected: vec![0, 0],
                    actual: shape.to_vec(),
                });
            }
        };
        Ok(MatrixShape { rows, cols, whole_rows, vector: shape.len() == 1 })
    }
}

/// `add`, `swiglu`: both operands `rows × cols` alike.
pub fn same_shape(op: &'static str, a: (usize, usize), b: (usize, usize)) -> Result<()> {
    if a != b {
        return Err(operands(op, format!("operands {}×{} and {}×{} differ", a.0, a.1, b.0, b.1)));
    }
    Ok(())
}

/// `rms_norm`, `add_bias`, sinks: `weight` must be a vector of `len` values.
pub fn vector_of(op: &'static str, weight: &str, is_vector: bool, actual: usize, len: usize) -> Result<()> {
    if !is_vector || actual != len {
        return Err(operands(op, format!("{weight} is not a vector of {len} values")));
    }
    Ok(())
}

/// `rms_norm_heads`: rows of `cols` split into `n_heads` heads, and `weight` a vector of one
/// head's width. Returns the head width.
pub fn rms_norm_heads(cols: usize, n_heads: usize, weight: &str, is_vector: bool, actual: usize) -> Result<usize> {
    if n_heads == 0 || !cols.is_multiple_of(n_heads) {
        return Err(operands("rms_norm_heads", format!("{cols} columns do not split into {n_heads} heads")));
    }
    let head_dim = cols / n_heads;
    vector_of("rms_norm_heads", weight, is_vector, actual, head_dim)?;
    Ok(head_dim)
}

/// `matmul_q`: a matrix `w` (`rows × cols`) times activations of `x_cols` columns.
pub fn matmul(weight: &str, w: MatrixShape, x_cols: usize) -> Result<()> {
    if w.vector || x_cols != w.cols {
        let message = format!("{weight} ({}×{}) cannot multiply rows of {x_cols}", w.rows, w.cols);
        return Err(operands("matmul_q", message));
    }
    Ok(())
}

/// `rope`: `positions.len()` rows of `n_heads` heads of at least `rope.dim` dimensions.
pub fn rope(rows: usize, cols: usize, n_heads: usize, positions: &[u32], rope: &RopeConfig) -> Result<()> {
    if positions.len() != rows || n_heads == 0 || !cols.is_multiple_of(n_heads) || rope.dim > cols / n_heads {
        return Err(operands("rope", format!("{rows}×{cols} with {n_heads} heads")));
    }
    if let rope::RopeScaling::FreqFactors { factors } = &rope.scaling
        && factors.len() < rope.dim / 2
    {
        return Err(operands("rope", format!("{} frequency factors for {} pairs", factors.len(), rope.dim / 2)));
    }
    Ok(())
}

/// The (cos, sin) pair of every row's position and rotated pair, interleaved
/// (`positions.len() × rope.dim / 2` pairs), cos and sin scaled by the step's multiplier
/// (long-rope, YaRN): the one rotation table both backends use.
pub fn rope_table(positions: &[u32], rope: &RopeConfig) -> Vec<f32> {
    let mut table = Vec::new();
    rope_table_into(positions, rope, &mut table, &mut Vec::new());
    table
}

/// [`rope_table`] into `table`, the inverse frequencies into `inv_freq` (their old values
/// replaced, their allocations kept).
pub fn rope_table_into(positions: &[u32], rope: &RopeConfig, table: &mut Vec<f32>, inv_freq: &mut Vec<f32>) {
    let max_pos = positions.iter().copied().max().unwrap_or(0);
    let mscale = rope::inv_freq_into(rope, max_pos, inv_freq);
    table.clear();
    table.reserve(positions.len() * inv_freq.len() * 2);
    for &pos in positions {
        for f in inv_freq.iter() {
            let (sin, cos) = (pos as f32 * f).sin_cos();
            table.extend([cos * mscale, sin * mscale]);
        }
    }
}

/// `attention`: `q` (`rows × n_head·head_dim`), `k` and `v` (`rows × n_head_kv·head_dim`) for
/// the batch's rows, a layer of the cache, each sequence's slot and rows in range and covering
/// the batch, every position inside the cache, and (with sinks) one sink per query head.
/// Returns the number of query heads.
pub fn attention(
    q: (usize, usize),
    k: (usize, usize),
    v: (usize, usize),
    cache: &CacheShape,
    layer: usize,
    batch: &Batch,
    sinks: Option<usize>,
) -> Result<usize> {
    let hd = cache.head_dim;
    let kv_dim = cache.n_head_kv * hd;
    let rows = batch.n_tokens();
    if q.0 != rows || k.0 != rows || v.0 != rows || k.1 != kv_dim || v.1 != kv_dim {
        let message = format!(
            "q {}×{}, k {}×{}, v {}×{} for {rows} tokens and {kv_dim} key/value columns",
            q.0, q.1, k.0, k.1, v.0, v.1
        );
        return Err(operands("attention", message));
    }
    if layer >= cache.n_layer || hd == 0 || !q.1.is_multiple_of(hd) || !(q.1 / hd).is_multiple_of(cache.n_head_kv) {
        return Err(operands("attention", format!("layer {layer} or {} query columns do not fit", q.1)));
    }
    let n_head = q.1 / hd;
    if sinks.is_some_and(|sinks| sinks != n_head) {
        return Err(operands("attention", format!("sinks are not one per query head ({n_head})")));
    }
    let mut covered = 0;
    for seq in &batch.seqs {
        if seq.slot >= cache.slots || seq.rows.end > rows {
            let message = format!("slot {} of {} or rows {:?}", seq.slot, cache.slots, seq.rows);
            return Err(operands("attention", message));
        }
        covered += seq.rows.len();
    }
    if covered != rows {
        return Err(operands("attention", format!("the sequences cover {covered} of {rows} rows")));
    }
    if let Some(&pos) = batch.positions.iter().find(|&&p| p as usize >= cache.capacity) {
        let message = format!("position {pos} is beyond the KV cache's {}", cache.capacity);
        return Err(ModelError::BadBatch { message });
    }
    Ok(n_head)
}

/// `moe`: router logits `rows × n_expert` for `x_rows` rows, and `1 ≤ k ≤ n_expert`.
pub fn moe(x_rows: usize, router: (usize, usize), p: &MoeParams) -> Result<()> {
    let (n_expert, k) = (p.n_expert, p.n_expert_used);
    if router.0 != x_rows || router.1 != n_expert || k == 0 || k > n_expert {
        let message = format!("router logits {}×{} for {x_rows} rows, {n_expert} experts, top {k}", router.0, router.1);
        return Err(operands("moe", message));
    }
    Ok(())
}

/// `moe`: a stacked expert matrix is `experts × rows` by `cols` (a bias: `experts` by `cols`).
pub fn experts(weight: &str, w: MatrixShape, experts: usize, rows: usize, cols: usize) -> Result<()> {
    if w.vector && experts * rows > 1 || w.rows != experts * rows || w.cols != cols || rows == 0 {
        let message = format!("{weight} is {}×{}, expected {experts}·{rows}×{cols}", w.rows, w.cols);
        return Err(operands("moe", message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_read_as_matrices() {
        assert_eq!(MatrixShape::of("v", &[8]).unwrap(), MatrixShape { rows: 1, cols: 8, whole_rows: 1, vector: true });
        let stacked = MatrixShape::of("e", &[4, 3, 8]).unwrap();
        assert_eq!((stacked.rows, stacked.whole_rows, stacked.vector), (12, 3, false));
        assert!(MatrixShape::of("t", &[1, 2, 3, 4]).is_err());
    }

    #[test]
    fn messages_name_the_op() {
        let err = same_shape("add", (2, 3), (2, 4)).unwrap_err();
        assert_eq!(err.to_string(), "add: operands 2×3 and 2×4 differ");
    }
}
