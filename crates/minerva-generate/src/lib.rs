//! Minerva's generation layer: text in, a stream of text out.
//!
//! ```text
//! GGUF metadata / tokenizer.json ─► Tokenizer        ids ↔ text, BOS/EOS/EOT, TextStream
//! tokenizer.chat_template        ─► ChatTemplate     messages → prompt text (minijinja)
//! Model<B> + Tokenizer           ─► Generator        prefill, then sample → decode → stream
//!                                     └─ Sampler     penalties, bias, temperature, top-k/p, min-p
//! messages (GPT-OSS)             ─► harmony          Harmony prompt text; completion → analysis/final
//! ```
//!
//! ```no_run
//! use minerva_generate::{ChatTemplate, Event, GenerateOptions, Message, Sampler, SamplingParams, Session, Tokenizer};
//! use minerva_model::{CpuBackend, Model};
//!
//! let path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
//! let tokenizer = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(path)?)?;
//! let model = Model::load(path, CpuBackend::new(None)?)?;
//! let prompt = ChatTemplate::from_tokenizer(&tokenizer)?.render(&[Message::new("user", "Hi!")], true, None)?;
//! let ids = tokenizer.encode(&prompt, false)?;
//! let mut session = Session::new(&model, &tokenizer, 2048)?;
//! let sampler = Sampler::new(SamplingParams { temperature: 0.7, seed: Some(1), ..Default::default() })?;
//! for event in session.generate(&ids, GenerateOptions::default(), sampler)? {
//!     match event? {
//!         Event::Text(piece) => print!("{piece}"),
//!         Event::Reasoning(thought) => eprint!("{thought}"),
//!         Event::Done(summary) => eprintln!("\n{} tokens, {:.1} tok/s", summary.completion_tokens, summary.decode_tokens_per_s),
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod constraint;
pub mod error;
pub mod generator;
pub mod harmony;
pub mod harmony_stream;
pub mod rng;
pub mod sampler;
pub mod speculative;
pub mod template;
pub mod tokenizer;
pub mod tools;

pub use constraint::{Constraint, Grammar, GrammarCompiler};
pub use error::{GenerateError, Result};
pub use generator::{Event, FinishReason, GenerateOptions, Generation, Session, StopText, Summary};
pub use harmony_stream::{HarmonyEvent, HarmonyOutput, HarmonyStream, OutputPiece};
pub use rng::Rng;
pub use sampler::{Distribution, Sampler, SamplingParams};
pub use speculative::{
    BatchPlanner, DraftCandidate, DraftModel, Drafter, NgramDrafter, SpacingClasses, SpecStats, Speculation, Verdict,
    check_same_vocabulary, draft_room, verify_draft,
};
pub use template::{ChatTemplate, Message};
pub use tokenizer::{TextStream, Tokenizer};
pub use tools::{ThinkStart, ToolFormat, ToolOutput};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
