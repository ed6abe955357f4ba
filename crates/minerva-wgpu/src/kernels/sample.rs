//! `sample_adjust.wgsl` + `sample.wgsl`: one token per row drawn on the device from a logits
//! buffer, so a sampled step reads back one id per sequence instead of the vocabulary's logits.

use minerva_model::DeviceSampling;

use crate::gpu::{Gpu, PipelineKey, StepTable, groups_1d};

/// Records the sampling of `rows` rows of `logits` (`rows × vocab` f32, modified in place by the
/// bias and penalties) into `out` (one u32 per row), one [`DeviceSampling`] per row.
/// Where the per-row settings and penalty entries go, step after step.
pub(crate) struct SamplingTables {
    rows: StepTable,
    adjust: StepTable,
}

impl Default for SamplingTables {
    fn default() -> Self {
        SamplingTables { rows: StepTable::new("sampling"), adjust: StepTable::new("sampling adjust") }
    }
}

pub(crate) fn sample(
    gpu: &Gpu,
    tables: &SamplingTables,
    logits: &wgpu::Buffer,
    out: &wgpu::Buffer,
    vocab: usize,
    params: &[DeviceSampling],
) {
    let row_params: Vec<u32> = params
        .iter()
        .flat_map(|s| {
            [
                s.temperature.to_bits(),
                s.top_k as u32,
                s.top_p.to_bits(),
                s.min_p.to_bits(),
                s.repeat_penalty.to_bits(),
                s.frequency_penalty.to_bits(),
                s.presence_penalty.to_bits(),
                (s.u as f32).to_bits(),
            ]
        })
        .collect();
    let rows = gpu.write_table(&tables.rows, bytemuck::cast_slice(&row_params));
    let adjust: Vec<u32> = params
        .iter()
        .enumerate()
        .flat_map(|(row, s)| {
            s.adjust.iter().map(move |&(token, count, bias)| [row as u32, token, count, bias.to_bits()])
        })
        .flatten()
        .collect();
    if !adjust.is_empty() {
        let n = adjust.len() / 4;
        let entries = gpu.write_table(&tables.adjust, bytemuck::cast_slice(&adjust));
        let source = || include_str!("sample_adjust.wgsl").to_string();
        let grid = groups_1d((n as u32).div_ceil(64));
        gpu.dispatch(
            PipelineKey::named("sample_adjust"),
            source,
            &[logits, &entries, &rows],
            &[vocab as u32, n as u32],
            grid,
        );
    }
    let source = || include_str!("sample.wgsl").to_string();
    let count = params.len() as u32;
    gpu.dispatch(PipelineKey::named("sample"), source, &[logits, &rows, out], &[vocab as u32, count], [count, 1, 1]);
}
