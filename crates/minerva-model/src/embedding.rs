//! Embeddings: a sequence's final hidden states (after the output norm, before the LM head)
//! pooled into one vector and L2-normalised — what llama.cpp's `llama-embedding` computes with
//! the same `--pooling`.

use std::fmt;
use std::str::FromStr;

/// How a sequence's hidden states become one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token.
    Mean,
    /// The first token's state (BERT's `[CLS]`).
    Cls,
    /// The last token's state (decoder models trained as embedders).
    Last,
}

impl Pooling {
    /// GGUF's `{arch}.pooling_type` (llama.cpp's `LLAMA_POOLING_TYPE_*`): 1 mean, 2 cls, 3 last;
    /// `None` for 0 (none), 4 (rank) and unknown codes.
    pub fn from_gguf_code(code: usize) -> Option<Pooling> {
        match code {
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }

    /// `mean`, `cls` or `last`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }

    /// Pools `hidden`, `tokens` rows of `dim` values (row-major), into one L2-normalised vector
    /// (an all-zero pooled vector stays zero). `None` when `hidden` is not `tokens × dim` or
    /// there are no tokens.
    pub fn pool(self, hidden: &[f32], tokens: usize, dim: usize) -> Option<Vec<f32>> {
        if tokens == 0 || dim == 0 || hidden.len() != tokens.checked_mul(dim)? {
            return None;
        }
        let mut out: Vec<f32> = match self {
            Pooling::Cls => hidden[..dim].to_vec(),
            Pooling::Last => hidden[(tokens - 1) * dim..].to_vec(),
            Pooling::Mean => {
                // Summed in f64: thousands of rows in f32 would lose the low bits.
                let mut sum = vec![0f64; dim];
                for row in hidden.chunks_exact(dim) {
                    for (s, &v) in sum.iter_mut().zip(row) {
                        *s += f64::from(v);
                    }
                }
                sum.iter().map(|&s| (s / tokens as f64) as f32).collect()
            }
        };
        let norm = out.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
        if norm > 0.0 {
            for v in &mut out {
                *v = (f64::from(*v) / norm) as f32;
            }
        }
        Some(out)
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pooling name that is not `mean`, `cls` or `last`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown pooling `{0}`; expected mean, cls or last")]
pub struct UnknownPooling(pub String);

impl FromStr for Pooling {
    type Err = UnknownPooling;

    fn from_str(s: &str) -> Result<Pooling, UnknownPooling> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            other => Err(UnknownPooling(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pooling_picks_its_rows_and_normalises() {
        // Two tokens of three values.
        let hidden = [3.0, 0.0, 4.0, 1.0, 2.0, 2.0];
        assert_eq!(Pooling::Cls.pool(&hidden, 2, 3).unwrap(), [0.6, 0.0, 0.8]);
        let last = Pooling::Last.pool(&hidden, 2, 3).unwrap();
        assert_eq!(last, [1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0]);
        // Mean (2, 1, 3) / √14.
        let mean = Pooling::Mean.pool(&hidden, 2, 3).unwrap();
        let n = 14f32.sqrt();
        for (got, want) in mean.iter().zip([2.0 / n, 1.0 / n, 3.0 / n]) {
            assert!((got - want).abs() < 1e-6, "{mean:?}");
        }
        assert_eq!(Pooling::Mean.pool(&[0.0; 4], 2, 2).unwrap(), [0.0, 0.0]);
    }

    #[test]
    fn wrong_shapes_and_names_are_refused() {
        assert_eq!(Pooling::Mean.pool(&[1.0; 5], 2, 3), None);
        assert_eq!(Pooling::Mean.pool(&[], 0, 3), None);
        assert_eq!("max".parse::<Pooling>(), Err(UnknownPooling("max".into())));
        assert_eq!("last".parse::<Pooling>(), Ok(Pooling::Last));
        assert_eq!(Pooling::from_gguf_code(2), Some(Pooling::Cls));
        assert_eq!(Pooling::from_gguf_code(4), None);
    }
}
