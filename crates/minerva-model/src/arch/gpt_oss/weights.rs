//! Loading [`GptOssWeights`] from the three layouts GPT-OSS ships in.
//!
//! | tensor             | GGUF (llama.cpp)            | HF SafeTensors (openai/…)                 | MLX (mlx-community/…)            |
//! |--------------------|-----------------------------|-------------------------------------------|----------------------------------|
//! | experts gate / up  | `ffn_{gate,up}_exps` MXFP4  | `experts.gate_up_proj_{blocks,scales}`,   | `experts.{gate,up}_proj` mxfp4   |
//! |                    |                             | gate/up rows interleaved (0,2,… / 1,3,…)  |                                  |
//! | experts down       | `ffn_down_exps` MXFP4       | `experts.down_proj_{blocks,scales}`       | `experts.down_proj` mxfp4        |
//! | expert biases      | `ffn_*_exps.bias` f32       | `gate_up_proj_bias` (interleaved), …      | `experts.*_proj.bias`            |
//! | attention, router, | Q8_0 / F32                  | bf16                                      | 8-bit affine, group 64           |
//! | embeddings, head   |                             |                                           |                                  |
//!
//! GGUF tensors are used in place (byte ranges of the map). SafeTensors plain tensors are too
//! (looked up by name in the mapped checkpoint), and so are HF's and MLX's MXFP4 experts: each is
//! a [`SplitMxfp4Source`] (nibbles and scales where they lie), which the CPU backend reads in place
//! (`minerva_quant::Matrix::Mxfp4Split`, converting a few rows at a time to GGML blocks in cache,
//! bit for bit llama.cpp's conversion) and other backends convert once at load. HF's gate and up
//! rows, interleaved in one tensor, become two weights reading every other row (row stride 2).
//! MLX affine matrices are converted once at load into owned buffers (anonymous memory with huge
//! pages, `crate::owned`): dequantized by `minerva_quant::MlxAffine::dequantize_exact_to_bytes`
//! (as MLX rounds) and stored in the scales' float type (bf16 here), twice their 8-bit size.
//!
//! Tensors are named once, in llama.cpp's terms: GGUF files are read through [`TensorSource`],
//! SafeTensors ones through the row's name table (`GPT_OSS_LAYER_NAMES`; the experts'
//! layout-specific names aside).

use std::sync::Arc;

use minerva_core::DType;
use minerva_safetensors::{Checkpoint, Encoding};

use crate::arch::registry::LayerNames;
use crate::owned::OwnedBytes;

use super::{GptOssConfig, GptOssLayer, GptOssWeights};
use crate::backend::{Backend, ByteSource, MlxAffineSource, SplitMxfp4Source, WeightSource};
use crate::error::{ModelError, Result};
use crate::source::{TensorSource, hf_name};

/// GGUF block-tensor suffix → Hugging Face / MLX module path (the experts aside).
pub(crate) const GPT_OSS_LAYER_NAMES: LayerNames = &[
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_q.bias", "self_attn.q_proj.bias"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_k.bias", "self_attn.k_proj.bias"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_v.bias", "self_attn.v_proj.bias"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("attn_output.bias", "self_attn.o_proj.bias"),
    ("attn_sinks.weight", "self_attn.sinks"),
    ("post_attention_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_gate_inp.weight", "mlp.router.weight"),
    ("ffn_gate_inp.bias", "mlp.router.bias"),
];

/// A plain tensor of a mapped SafeTensors checkpoint, looked up by name.
struct CheckpointTensor {
    ckpt: Arc<Checkpoint>,
    name: String,
}

impl ByteSource for CheckpointTensor {
    fn bytes(&self) -> &[u8] {
        // The name was resolved when the weight was made; the checkpoint is immutable.
        self.ckpt.tensor(&self.name).map_or(&[], |t| t.view.bytes)
    }
}

fn shape_error(tensor: &str, expected: &[usize], actual: &[usize]) -> ModelError {
    ModelError::TensorShape { tensor: tensor.to_string(), expected: expected.to_vec(), actual: actual.to_vec() }
}

fn owned<B: Backend>(
    backend: &B,
    name: &str,
    dtype: DType,
    shape: &[usize],
    bytes: impl Into<OwnedBytes>,
) -> Result<B::Weight> {
    let bytes = bytes.into();
    let range = 0..bytes.bytes().len();
    backend.weight(WeightSource { file: Arc::new(bytes), name: name.into(), dtype, shape: shape.into(), range })
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The shapes of every GPT-OSS tensor, by role.
struct Shapes {
    e: usize,
    q: usize,
    kv: usize,
    ff: usize,
    n_expert: usize,
    n_head: usize,
    vocab: usize,
}

impl Shapes {
    fn new(cfg: &GptOssConfig) -> Shapes {
        let c = &cfg.base;
        Shapes {
            e: c.n_embd,
            q: c.q_dim(),
            kv: c.kv_dim(),
            ff: c.n_ff,
            n_expert: cfg.n_expert,
            n_head: c.n_head,
            vocab: c.vocab,
        }
    }
}

/// Builds every layer from a loader `w(gguf_suffix, hf_suffix, shape)`; expert tensors go through
/// `experts(layer)`.
fn assemble<W>(
    cfg: &GptOssConfig,
    mut w: impl FnMut(usize, &str, &[usize]) -> Result<W>,
    mut experts: impl FnMut(usize) -> Result<[W; 6]>,
) -> Result<Vec<GptOssLayer<W>>> {
    let s = Shapes::new(cfg);
    (0..cfg.base.n_layer)
        .map(|il| {
            let [gate_exps, gate_bias, up_exps, up_bias, down_exps, down_bias] = experts(il)?;
            Ok(GptOssLayer {
                attn_norm: w(il, "attn_norm.weight", &[s.e])?,
                wq: w(il, "attn_q.weight", &[s.q, s.e])?,
                bq: w(il, "attn_q.bias", &[s.q])?,
                wk: w(il, "attn_k.weight", &[s.kv, s.e])?,
                bk: w(il, "attn_k.bias", &[s.kv])?,
                wv: w(il, "attn_v.weight", &[s.kv, s.e])?,
                bv: w(il, "attn_v.bias", &[s.kv])?,
                wo: w(il, "attn_output.weight", &[s.e, s.q])?,
                bo: w(il, "attn_output.bias", &[s.e])?,
                sinks: w(il, "attn_sinks.weight", &[s.n_head])?,
                ffn_norm: w(il, "post_attention_norm.weight", &[s.e])?,
                router: w(il, "ffn_gate_inp.weight", &[s.n_expert, s.e])?,
                router_bias: w(il, "ffn_gate_inp.bias", &[s.n_expert])?,
                gate_exps,
                gate_bias,
                up_exps,
                up_bias,
                down_exps,
                down_bias,
            })
        })
        .collect()
}

impl<W> GptOssWeights<W> {
    /// Handles for every tensor of a llama.cpp GPT-OSS GGUF, shapes checked against `cfg`.
    pub fn load<B>(backend: &B, src: &TensorSource, cfg: &GptOssConfig) -> Result<GptOssWeights<W>>
    where
        B: Backend<Weight = W>,
    {
        let s = Shapes::new(cfg);
        let layers = assemble(
            cfg,
            |il, suffix, shape| src.weight(backend, &format!("blk.{il}.{suffix}"), shape),
            |il| {
                let t = |suffix: &str, shape: &[usize]| src.weight(backend, &format!("blk.{il}.{suffix}"), shape);
                Ok([
                    t("ffn_gate_exps.weight", &[s.n_expert, s.ff, s.e])?,
                    t("ffn_gate_exps.bias", &[s.n_expert, s.ff])?,
                    t("ffn_up_exps.weight", &[s.n_expert, s.ff, s.e])?,
                    t("ffn_up_exps.bias", &[s.n_expert, s.ff])?,
                    t("ffn_down_exps.weight", &[s.n_expert, s.e, s.ff])?,
                    t("ffn_down_exps.bias", &[s.n_expert, s.e])?,
                ])
            },
        )?;
        Ok(GptOssWeights {
            token_embd: src.weight(backend, "token_embd.weight", &[s.vocab, s.e])?,
            output_norm: src.weight(backend, "output_norm.weight", &[s.e])?,
            output: src.weight(backend, "output.weight", &[s.vocab, s.e])?,
            layers,
        })
    }

    /// Handles for every tensor of a Hugging Face (`_blocks`/`_scales` experts) or MLX
    /// (`quantization` in config.json) GPT-OSS checkpoint, shapes checked against `cfg`.
    pub fn from_safetensors<B>(backend: &B, ckpt: &Arc<Checkpoint>, cfg: &GptOssConfig) -> Result<GptOssWeights<W>>
    where
        B: Backend<Weight = W>,
    {
        let s = Shapes::new(cfg);
        let mlx = ckpt.config().is_some_and(|c| c.get("quantization").is_some());
        let st = |gguf_name: &str, shape: &[usize]| {
            st_weight(backend, ckpt, &hf_name(super::GPT_OSS.name, gguf_name), shape)
        };
        let layers = assemble(
            cfg,
            |il, suffix, shape| st(&format!("blk.{il}.{suffix}"), shape),
            |il| {
                let p = format!("model.layers.{il}.mlp.experts.");
                // MLX checkpoints (a `quantization` section) use mlx-lm's sanitized names.
                let down = if mlx { format!("{p}down_proj.weight") } else { format!("{p}down_proj") };
                let down = st_weight(backend, ckpt, &down, &[s.n_expert, s.e, s.ff])?;
                let down_bias = if mlx { format!("{p}down_proj.bias") } else { format!("{p}down_proj_bias") };
                let down_bias = st_bias(backend, ckpt, &down_bias, &[s.n_expert, s.e])?;
                if !mlx {
                    // HF: gate and up rows interleaved in one tensor.
                    let (gate, up) = hf_gate_up(backend, ckpt, &format!("{p}gate_up_proj"), &s)?;
                    let (gate_bias, up_bias) = hf_gate_up_bias(backend, ckpt, &format!("{p}gate_up_proj_bias"), &s)?;
                    Ok([gate, gate_bias, up, up_bias, down, down_bias])
                } else {
                    // MLX (after mlx-lm's sanitize): separate gate_proj / up_proj.
                    let (shape, bias) = ([s.n_expert, s.ff, s.e], [s.n_expert, s.ff]);
                    Ok([
                        st_weight(backend, ckpt, &format!("{p}gate_proj.weight"), &shape)?,
                        st_bias(backend, ckpt, &format!("{p}gate_proj.bias"), &bias)?,
                        st_weight(backend, ckpt, &format!("{p}up_proj.weight"), &shape)?,
                        st_bias(backend, ckpt, &format!("{p}up_proj.bias"), &bias)?,
                        down,
                        down_bias,
                    ])
                }
            },
        )?;
        Ok(GptOssWeights {
            token_embd: st("token_embd.weight", &[s.vocab, s.e])?,
            output_norm: st("output_norm.weight", &[s.e])?,
            output: st("output.weight", &[s.vocab, s.e])?,
            layers,
        })
    }
}

/// A SafeTensors (logical) tensor as a backend weight: plain tensors in place, MXFP4 converted to
/// GGML blocks, MLX affine dequantized to its scales' float type.
fn st_weight<B: Backend>(backend: &B, ckpt: &Arc<Checkpoint>, name: &str, expected: &[usize]) -> Result<B::Weight> {
    let lt = ckpt.logical_tensor(name).ok_or_else(|| ModelError::MissingTensor { tensor: name.to_string() })?;
    if lt.shape != expected {
        return Err(shape_error(name, expected, lt.shape));
    }
    match lt.encoding {
        Encoding::Plain(view) => {
            if !matches!(view.dtype, DType::F32 | DType::F16 | DType::BF16) {
                return Err(ModelError::TensorDType {
                    tensor: name.into(),
                    dtype: view.dtype,
                    usage: "a GPT-OSS weight",
                });
            }
            let file: Arc<dyn ByteSource> = Arc::new(CheckpointTensor { ckpt: ckpt.clone(), name: view.name.into() });
            backend.weight(WeightSource {
                file,
                name: name.into(),
                dtype: view.dtype,
                shape: expected.into(),
                range: 0..view.bytes.len(),
            })
        }
        Encoding::HfMxfp4 { blocks, scales } | Encoding::MlxMxfp4 { weight: blocks, scales, .. } => {
            let tensor = |view: &minerva_core::TensorView<'_>| -> Arc<dyn ByteSource> {
                Arc::new(CheckpointTensor { ckpt: ckpt.clone(), name: view.name.into() })
            };
            backend.split_mxfp4_weight(SplitMxfp4Source {
                nibbles: tensor(&blocks),
                nibbles_range: 0..blocks.bytes.len(),
                scales: tensor(&scales),
                scales_range: 0..scales.bytes.len(),
                row_stride: 1,
                name: name.into(),
                shape: expected.into(),
            })
        }
        Encoding::MlxAffine { weight, scales, biases, bits, group_size } => {
            let tensor = |view: &minerva_core::TensorView<'_>| -> Arc<dyn ByteSource> {
                Arc::new(CheckpointTensor { ckpt: ckpt.clone(), name: view.name.into() })
            };
            let params = crate::backend::mlx_affine_params(bits, group_size, &scales);
            backend.mlx_affine_weight(MlxAffineSource {
                weight: tensor(&weight),
                weight_range: 0..weight.bytes.len(),
                scales: tensor(&scales),
                scales_range: 0..scales.bytes.len(),
                biases: tensor(&biases),
                biases_range: 0..biases.bytes.len(),
                params,
                name: name.into(),
                shape: expected.into(),
            })
        }
    }
}

/// A bias matrix as an owned f32 weight.
fn st_bias<B: Backend>(backend: &B, ckpt: &Arc<Checkpoint>, name: &str, expected: &[usize]) -> Result<B::Weight> {
    let values = plain_f32(ckpt, name, expected)?;
    owned(backend, name, DType::F32, expected, f32_bytes(&values))
}

/// A plain float tensor's values.
fn plain_f32(ckpt: &Checkpoint, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
    let lt = ckpt.logical_tensor(name).ok_or_else(|| ModelError::MissingTensor { tensor: name.to_string() })?;
    if lt.shape != expected {
        return Err(shape_error(name, expected, lt.shape));
    }
    let Encoding::Plain(view) = lt.encoding else {
        return Err(ModelError::TensorEncoding {
            tensor: name.into(),
            expected: "a plain float tensor",
            found: lt.encoding.kind().to_string(),
        });
    };
    let mut values = vec![0.0; expected.iter().product()];
    minerva_quant::dequantize(view.dtype, view.bytes, &mut values).map_err(|_| ModelError::TensorDType {
        tensor: name.into(),
        dtype: view.dtype,
        usage: "a GPT-OSS bias",
    })?;
    Ok(values)
}

/// HF `gate_up_proj` (`[E, 2·ff, e]` MXFP4, gate rows even, up rows odd) → MXFP4 gate and up
/// weights, each every other row of the tensor where it lies.
fn hf_gate_up<B: Backend>(
    backend: &B,
    ckpt: &Arc<Checkpoint>,
    name: &str,
    s: &Shapes,
) -> Result<(B::Weight, B::Weight)> {
    let lt = ckpt.logical_tensor(name).ok_or_else(|| ModelError::MissingTensor { tensor: name.to_string() })?;
    let expected = [s.n_expert, 2 * s.ff, s.e];
    if lt.shape != expected {
        return Err(shape_error(name, &expected, lt.shape));
    }
    let Encoding::HfMxfp4 { blocks, scales } = lt.encoding else {
        return Err(ModelError::TensorEncoding {
            tensor: name.into(),
            expected: "HF MXFP4 blocks/scales",
            found: lt.encoding.kind().to_string(),
        });
    };
    let groups = s.e / 32;
    let (nibbles, scale_bytes): (Arc<dyn ByteSource>, Arc<dyn ByteSource>) = (
        Arc::new(CheckpointTensor { ckpt: ckpt.clone(), name: blocks.name.into() }),
        Arc::new(CheckpointTensor { ckpt: ckpt.clone(), name: scales.name.into() }),
    );
    // The up half starts one physical row in.
    let half = |first_row: usize, which: &str| {
        backend.split_mxfp4_weight(SplitMxfp4Source {
            nibbles: nibbles.clone(),
            nibbles_range: first_row * groups * 16..blocks.bytes.len(),
            scales: scale_bytes.clone(),
            scales_range: first_row * groups..scales.bytes.len(),
            row_stride: 2,
            name: format!("{name} ({which} rows)"),
            shape: vec![s.n_expert, s.ff, s.e],
        })
    };
    Ok((half(0, "gate")?, half(1, "up")?))
}

/// HF `gate_up_proj_bias` (`[E, 2·ff]`, interleaved) → f32 gate and up biases.
fn hf_gate_up_bias<B: Backend>(
    backend: &B,
    ckpt: &Checkpoint,
    name: &str,
    s: &Shapes,
) -> Result<(B::Weight, B::Weight)> {
    let values = plain_f32(ckpt, name, &[s.n_expert, 2 * s.ff])?;
    let gate: Vec<f32> = values.iter().step_by(2).copied().collect();
    let up: Vec<f32> = values.iter().skip(1).step_by(2).copied().collect();
    let shape = [s.n_expert, s.ff];
    Ok((
        owned(backend, &format!("{name} (gate)"), DType::F32, &shape, f32_bytes(&gate))?,
        owned(backend, &format!("{name} (up)"), DType::F32, &shape, f32_bytes(&up))?,
    ))
}
