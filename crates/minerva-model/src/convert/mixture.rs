//! `--quant`: which GGML type each weight matrix of a GGUF output gets — one type for all (as
//! `llama-quantize --pure`), or llama.cpp's `Q4_K_M` / `Q5_K_M` mixtures, chosen tensor by tensor
//! by the rules of its `llama_tensor_get_type` (`src/llama-quant.cpp`, b11312) for dense and MoE
//! models without 8 experts:
//!
//! | tensor | Q4_K_M | Q5_K_M |
//! |---|---|---|
//! | `output.weight` (or `token_embd.weight` when tied) | Q6_K | Q6_K |
//! | `attn_v` / `attn_qkv`, the i-th of n in layer order | Q6_K if `more_bits(i, n)`, else Q4_K | Q6_K if `more_bits`, else Q5_K |
//! | `ffn_down` of layer i of n | Q6_K if `more_bits(i, n)`, else Q4_K | Q6_K if `more_bits`, else Q5_K |
//! | every other matrix | Q4_K | Q5_K |
//!
//! `more_bits(i, n)`: `i < n/8 || i >= 7n/8 || (i − n/8) % 3 == 2`. A model llama.cpp takes for a
//! 70B (`ArchSpec::llama_cpp_70b`: LLaMA or Mistral with 80 layers and fewer KV heads than heads,
//! Qwen 2 with 80) gets Q5_K for the `attn_v` it would give Q4_K. A row length the chosen type's
//! block does not divide falls back as llama.cpp's `tensor_type_fallback` does (Q4_K → Q5_0,
//! Q5_K → Q5_1, Q6_K → Q8_0; the head to Q8_0 directly; F16 when even 32 does not divide).
//! Not reproduced: the rules for 8-expert models (Mixtral) and Falcon's, architectures Minerva
//! does not run.

use minerva_core::DType;

use super::source::CanonTensor;

/// What `--quant` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    /// One type for every weight matrix (llama-quantize `--pure`), with its shape fallback.
    Type(DType),
    /// llama.cpp's `Q4_K_M` mixture.
    Q4KM,
    /// llama.cpp's `Q5_K_M` mixture.
    Q5KM,
}

/// The types `Quant::Type` takes: those minerva-quant quantizes bit-identically to ggml.
pub const QUANT_TYPES: &[DType] = &[
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::MXFP4,
];

impl Quant {
    /// `q4_k_m`, `q5_k_m`, or a type of [`QUANT_TYPES`] by its lower-case name (`q4_k`, `q8_0`, …).
    pub fn parse(name: &str) -> Option<Quant> {
        match name.to_ascii_lowercase().as_str() {
            "q4_k_m" => Some(Quant::Q4KM),
            "q5_k_m" => Some(Quant::Q5KM),
            other => QUANT_TYPES.iter().find(|d| d.to_string().eq_ignore_ascii_case(other)).map(|&d| Quant::Type(d)),
        }
    }

    /// llama.cpp's `llama_ftype` number for `general.file_type` (`None`: let the file's main type
    /// decide).
    pub(crate) fn file_type(self) -> Option<u32> {
        Some(match self {
            Quant::Q4KM => 15,
            Quant::Q5KM => 17,
            Quant::Type(DType::Q4_K) => 14,
            Quant::Type(DType::Q5_K) => 16,
            Quant::Type(DType::Q6_K) => 18,
            Quant::Type(DType::Q5_0) => 8,
            Quant::Type(DType::Q5_1) => 9,
            Quant::Type(_) => return None,
        })
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third between.
fn more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
}

/// The block layer of `name` (`blk.N.…`), as llama.cpp's loader sorts tensors (others first).
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()
}

fn is_attn_v(name: &str) -> bool {
    name.contains("attn_v.weight") || name.contains("attn_qkv.weight") || name.contains("attn_kv_b.weight")
}

/// The type llama.cpp's `tensor_type_fallback` gives a row of `cols` values that `wanted`'s
/// block does not divide.
pub(crate) fn fallback(wanted: DType, cols: usize) -> DType {
    let fits = |d: DType| cols.is_multiple_of(d.block_elems());
    if fits(wanted) {
        return wanted;
    }
    let next = match wanted {
        DType::Q4_K => DType::Q5_0,
        DType::Q5_K => DType::Q5_1,
        DType::Q6_K => DType::Q8_0,
        other => other,
    };
    if fits(next) { next } else { DType::F16 }
}

/// The type `quant` gives each matrix of `tensors` (`is_matrix` says which are matrices; `None`
/// for the others), in their order; `n_layer` as the model has it, `seventy_b` whether llama.cpp
/// takes it for a 70B.
pub(crate) fn matrix_types(
    quant: Quant,
    tensors: &[CanonTensor],
    is_matrix: impl Fn(&CanonTensor) -> bool,
    n_layer: usize,
    seventy_b: bool,
) -> Vec<Option<DType>> {
    let tied = !tensors.iter().any(|t| t.name == "output.weight");
    // llama.cpp counts `attn_v` tensors in its loader's order: by layer, then by name.
    let mut v_order: Vec<(Option<usize>, &str)> =
        tensors.iter().filter(|t| is_attn_v(&t.name)).map(|t| (layer_of(&t.name), t.name.as_str())).collect();
    v_order.sort();
    let (base, more) = match quant {
        Quant::Type(d) => (d, d),
        Quant::Q4KM => (DType::Q4_K, DType::Q6_K),
        Quant::Q5KM => (DType::Q5_K, DType::Q6_K),
    };
    tensors
        .iter()
        .map(|t| {
            if !is_matrix(t) {
                return None;
            }
            let cols = t.shape.last().copied().unwrap_or(0);
            let head = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
            let wanted = match quant {
                Quant::Type(_) => base,
                _ if head => match cols.is_multiple_of(DType::Q6_K.block_elems()) {
                    true => DType::Q6_K,
                    false => DType::Q8_0,
                },
                _ if is_attn_v(&t.name) => {
                    let i = v_order.iter().position(|(_, n)| *n == t.name).unwrap_or(0);
                    match if more_bits(i, v_order.len()) { more } else { base } {
                        // A 70B's V heads are shared by 8 query heads: more bits cost little.
                        DType::Q4_K if seventy_b => DType::Q5_K,
                        chosen => chosen,
                    }
                }
                _ if t.name.contains("ffn_down") => match layer_of(&t.name) {
                    Some(i) if more_bits(i, n_layer) => more,
                    _ => base,
                },
                _ => base,
            };
            Some(fallback(wanted, cols))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_picks_llama_cpp_layers() {
        let picked: Vec<usize> = (0..24).filter(|&i| more_bits(i, 24)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
        let picked: Vec<usize> = (0..8).filter(|&i| more_bits(i, 8)).collect();
        assert_eq!(picked, [0, 3, 6, 7]);
    }

    /// A 70B-sized model (80 layers) gets Q5_K for the `attn_v` that Q4_K_M gives Q4_K, Q6_K
    /// where `more_bits` picks the layer, as before; Q5_K_M's and every other tensor's types, and
    /// a model that is not a 70B, are unchanged.
    #[test]
    fn a_70b_gets_more_bits_in_attn_v() {
        let tensors: Vec<CanonTensor> = (0..80)
            .flat_map(|i| {
                ["attn_v", "attn_k", "ffn_down"]
                    .map(|n| CanonTensor::for_test(&format!("blk.{i}.{n}.weight"), DType::F16, &[1024, 8192]))
            })
            .collect();
        let types = |quant, seventy_b| matrix_types(quant, &tensors, |_| true, 80, seventy_b);
        let of = |types: &[Option<DType>], name: &str| types[tensors.iter().position(|t| t.name == name).unwrap()];
        let (big, small) = (types(Quant::Q4KM, true), types(Quant::Q4KM, false));
        assert_eq!(of(&big, "blk.11.attn_v.weight"), Some(DType::Q5_K), "layer 11 of 80: not more_bits");
        assert_eq!(of(&small, "blk.11.attn_v.weight"), Some(DType::Q4_K));
        assert_eq!(of(&big, "blk.0.attn_v.weight"), Some(DType::Q6_K));
        for name in ["blk.11.attn_k.weight", "blk.11.ffn_down.weight", "blk.0.ffn_down.weight"] {
            assert_eq!(of(&big, name), of(&small, name), "{name}");
        }
        assert_eq!(types(Quant::Q5KM, true), types(Quant::Q5KM, false));
        assert_eq!(types(Quant::Type(DType::Q4_K), true), types(Quant::Type(DType::Q4_K), false));
    }

    #[test]
    fn fallbacks_and_names() {
        assert_eq!(fallback(DType::Q4_K, 576), DType::Q5_0);
        assert_eq!(fallback(DType::Q6_K, 640), DType::Q8_0);
        assert_eq!(fallback(DType::Q5_K, 2048), DType::Q5_K);
        assert_eq!(fallback(DType::Q8_0, 40), DType::F16);
        assert_eq!(Quant::parse("Q4_K_M"), Some(Quant::Q4KM));
        assert_eq!(Quant::parse("q6_k"), Some(Quant::Type(DType::Q6_K)));
        assert_eq!(Quant::parse("q2_k"), None);
    }
}
