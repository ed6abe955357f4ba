//! GPT-OSS mixture of experts on the GPU, recorded into the step like every other op (no
//! read-back): route on the GPU, then run each (token, slot) pair's expert.
//!
//! ```text
//! router logits [rows × n_expert] --moe_route--> ids, weights [rows × k]
//! x [rows × n_embd] --mul_mat_id(gate), (up)--> [rows·k × n_ff] each, + expert_bias
//!                   --swiglu_oai--> [rows·k × n_ff] --mul_mat_id(down)--> [rows·k × n_embd] + expert_bias
//!                   --moe_sum (routing weights)--> [rows × n_embd]
//! ```
//!
//! Only the picked experts' weight rows are read. A decode step (one token) runs one workgroup
//! set per pair (`mul_mat_id`); a prefill groups the pairs by expert (`mul_mat_id_grouped`: one
//! workgroup set per expert walks the pairs routed to it, 8 at a time), so each picked expert's
//! weights are read once per 8 of its tokens rather than once per token. The grouping needs no
//! sort and no read-back: each expert's workgroups scan the routing ids themselves.

use minerva_model::{ModelError, MoeExperts, MoeParams, Result, checks};

use crate::gpu::Gpu;
use crate::kernels;
use crate::tensor::WgpuTensor;
use crate::weight::WgpuWeight;

/// The most (token, slot) pairs one step may route (workgroups along z).
const MAX_PAIRS: usize = 65535;

/// The most experts `moe_route.wgsl` picks from (its bit mask of picked experts) and picks
/// (`MAX_K`, the picked logits it holds).
const MAX_EXPERTS: usize = 256;
const MAX_EXPERTS_USED: usize = 32;

/// See [`minerva_model::Backend::moe`].
pub(crate) fn moe(
    gpu: &Gpu,
    plan: &kernels::MatmulPlan,
    x: &WgpuTensor,
    router_logits: &WgpuTensor,
    experts: &MoeExperts<'_, WgpuWeight>,
    p: &MoeParams,
) -> Result<WgpuTensor> {
    let (rows, n_embd, n_expert, k) = (x.rows, x.cols, p.n_expert, p.n_expert_used);
    checks::moe(rows, (router_logits.rows, router_logits.cols), p)?;
    let pairs = rows * k;
    if n_expert > MAX_EXPERTS || k > MAX_EXPERTS_USED {
        let message =
            format!("moe: {n_expert} experts, top {k}: the GPU routes at most top {MAX_EXPERTS_USED} of {MAX_EXPERTS}");
        return Err(ModelError::Resource { message });
    }
    if pairs > MAX_PAIRS {
        let message = format!("moe: {rows} rows × top {k} exceed the GPU limit of {MAX_PAIRS} pairs");
        return Err(ModelError::Resource { message });
    }
    let n_ff = experts.gate.rows / n_expert;
    check(experts.gate, n_expert, n_ff, n_embd)?;
    check(experts.up, n_expert, n_ff, n_embd)?;
    check(experts.down, n_expert, n_embd, n_ff)?;
    check_bias(experts.gate_bias, n_expert, n_ff)?;
    check_bias(experts.up_bias, n_expert, n_ff)?;
    check_bias(experts.down_bias, n_expert, n_embd)?;

    let ids = WgpuTensor::new(gpu, pairs, 1)?;
    let weights = WgpuTensor::new(gpu, pairs, 1)?;
    kernels::moe_route::moe_route(gpu, router_logits.read(gpu), ids.buffer(), weights.buffer(), rows, n_expert, k);
    let ids = ids.buffer();

    // Decode: one workgroup set per pair; prefill: per expert, over the pairs routed to it.
    let expert_matmul = |w: &WgpuWeight, expert_rows: usize, x: &wgpu::Buffer, x_div: usize, y: &wgpu::Buffer| {
        if pairs <= k {
            kernels::mul_mat_id::mul_mat_id(gpu, w, expert_rows, x, x_div, ids, pairs, y, plan);
        } else {
            kernels::mul_mat_id_grouped::mul_mat_id_grouped(gpu, w, expert_rows, x, x_div, ids, pairs, rows, y, plan);
        }
    };
    let gate = WgpuTensor::new(gpu, pairs, n_ff)?;
    let up = WgpuTensor::new(gpu, pairs, n_ff)?;
    let x = x.read(gpu);
    expert_matmul(experts.gate, n_ff, x, k, gate.buffer());
    expert_matmul(experts.up, n_ff, x, k, up.buffer());
    kernels::expert_bias::expert_bias(gpu, experts.gate_bias, ids, pairs, gate.buffer());
    kernels::expert_bias::expert_bias(gpu, experts.up_bias, ids, pairs, up.buffer());
    kernels::swiglu_oai::swiglu_oai(gpu, gate.buffer(), up.buffer(), pairs * n_ff, p.alpha, p.limit);

    let down = WgpuTensor::new(gpu, pairs, n_embd)?;
    expert_matmul(experts.down, n_embd, gate.buffer(), 1, down.buffer());
    kernels::expert_bias::expert_bias(gpu, experts.down_bias, ids, pairs, down.buffer());
    let out = WgpuTensor::new(gpu, rows, n_embd)?;
    kernels::moe_sum::moe_sum(gpu, down.buffer(), weights.buffer(), out.buffer(), rows, n_embd, k);
    Ok(out)
}

/// Checks a stacked weight is `experts × rows` by `cols` (the shared check), in chunks of whole
/// experts (the kernels read one expert from one binding).
fn check(w: &WgpuWeight, experts: usize, rows: usize, cols: usize) -> Result<()> {
    checks::experts(&w.name, w.shape(), experts, rows, cols)?;
    let whole = w.chunks.iter().all(|c| c.row_start.is_multiple_of(rows.max(1)) && c.rows.is_multiple_of(rows.max(1)));
    if !whole {
        let message = format!("{} is split in {} chunks, not between experts", w.name, w.chunks.len());
        return Err(checks::operands("moe", message));
    }
    Ok(())
}

/// Checks a stacked bias is `experts × len` (the shared check) in one buffer.
fn check_bias(w: &WgpuWeight, experts: usize, len: usize) -> Result<()> {
    checks::experts(&w.name, w.shape(), 1, experts, len)?;
    if w.chunks.len() != 1 {
        return Err(checks::operands("moe", format!("bias {} is split in {} chunks", w.name, w.chunks.len())));
    }
    Ok(())
}
