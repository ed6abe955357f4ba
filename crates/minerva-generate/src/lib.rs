//! Minerva's generation layer: text in, a stream of text out.
//!
//! ```text
//! GGUF metadata / tokenizer.json ─► Tokenizer        ids ↔ text, BOS/EOS/EOT, TextStream
//! tokenizer.chat_template        ─► ChatTemplate     messages → prompt text (minijinja)
//! Model<B> + Tokenizer           ─► Generator        prefill, then sample → decode → stream
//!                                     └─ Sampler     penalties, bias, temperature, top-k/p, min-p
//! ```

pub mod error;
pub mod generator;
pub mod rng;
pub mod sampler;
pub mod template;
pub mod tokenizer;

pub use error::{GenerateError, Result};
pub use generator::{Event, FinishReason, GenerateOptions, Generation, Session, StopText, Summary};
pub use rng::Rng;
pub use sampler::{Sampler, SamplingParams};
pub use template::{ChatTemplate, Message};
pub use tokenizer::{TextStream, Tokenizer};
