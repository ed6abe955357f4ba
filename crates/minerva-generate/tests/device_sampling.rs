//! Sampling on the GPU (`Backend::sample`, wgpu on lavapipe in CI; fails without an adapter)
//! against the host sampler, draw by draw.
//!
//! For each case (a logits row, settings, a history for the penalties) the same draws `u` go to
//! both: `Sampler::sample_with_draw` on the host and, through `Sampler::device_sampling`'s plan
//! with that `u`, the device. Equal tokens for every draw means equal distributions. The device
//! sums probabilities in f32 where the host uses f64, so a draw within 1e-4 of a boundary of the
//! cumulative distribution may fall on the neighbouring token. Only such draws may differ, and
//! they are counted.

use std::sync::Arc;

use minerva_core::DType;
use minerva_generate::{Sampler, SamplingParams};
use minerva_model::{Backend, ByteSource, DeviceSampling, WeightSource};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

struct Bytes(Vec<u8>);
impl ByteSource for Bytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// xorshift64*, uniform in [-1, 1).
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// The host sampler's cumulative distribution after the whole chain, as (token, running sum).
fn host_cdf(sampler: &Sampler, logits: &[f32], history: &[u32]) -> Vec<(u32, f64)> {
    // Probe the chain with draws on a fine grid: token boundaries are where the answer changes.
    let mut cdf = Vec::new();
    let steps = 20_000;
    let mut last = None;
    for i in 0..steps {
        let u = i as f64 / steps as f64;
        let t = sampler.sample_with_draw(&mut logits.to_vec(), history, u);
        if last != Some(t) {
            cdf.push((t, u));
            last = Some(t);
        }
    }
    cdf
}

#[test]
fn device_draws_match_the_host_sampler() {
    let gpu = WgpuBackend::new(WgpuOptions::default()).expect("these tests need a wgpu adapter (lavapipe)");
    let vocab = 600;
    // The head is the identity: the logits of row r are x[r].
    let mut identity = vec![0.0f32; vocab * vocab];
    for i in 0..vocab {
        identity[i * vocab + i] = 1.0;
    }
    let bytes: Vec<u8> = identity.iter().flat_map(|v| v.to_le_bytes()).collect();
    let len = bytes.len();
    let source = WeightSource {
        file: Arc::new(Bytes(bytes)),
        name: "head".into(),
        dtype: DType::F32,
        shape: vec![vocab, vocab],
        range: 0..len,
    };
    let head = gpu.weight(source).unwrap();
    let mut rng = Rng(7);
    let history: Vec<u32> = (0..40).map(|i| (i * 37 % 50) as u32).collect();
    let base = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, ..SamplingParams::default() };
    let cases = [
        ("defaults", base.clone()),
        ("top-k only, hot", SamplingParams { top_k: 256, top_p: 1.0, min_p: 0.0, temperature: 1.7, ..base.clone() }),
        ("top-k 1", SamplingParams { top_k: 1, ..base.clone() }),
        ("top-p 0.5, cold", SamplingParams { top_p: 0.5, temperature: 0.3, min_p: 0.0, ..base.clone() }),
        ("min-p 0.2", SamplingParams { min_p: 0.2, top_p: 1.0, ..base.clone() }),
        ("greedy with penalties", SamplingParams { temperature: 0.0, repeat_penalty: 1.5, ..base.clone() }),
        (
            "penalties and bias",
            SamplingParams {
                repeat_penalty: 1.3,
                frequency_penalty: 0.4,
                presence_penalty: 0.2,
                logit_bias: vec![(3, 2.5), (5, -100.0), (3, 0.5), (599, 1.0), (10_000, 5.0)],
                ..base.clone()
            },
        ),
    ];
    let draws: Vec<f64> = (0..48).map(|i| (i as f64 + 0.5) / 48.0).collect();
    let (mut compared, mut near_boundary) = (0, 0);
    for (name, params) in cases {
        // Logits with ties (rounded to 1/8), scale ~3; three tokens banned with a bias of -inf (the
        // head is a matmul, so -inf cannot be in its input).
        let logits: Vec<f32> = (0..vocab).map(|_| (rng.unit() * 24.0).round() / 8.0).collect();
        let mut params = params;
        params.logit_bias.extend([1, 77, 300].map(|t| (t, f32::NEG_INFINITY)));
        let sampler = Sampler::new(params.clone()).unwrap();
        let plan: DeviceSampling = Sampler::new(params).unwrap().device_sampling(&history).expect("a device plan");
        let plans: Vec<DeviceSampling> = draws.iter().map(|&u| DeviceSampling { u, ..plan.clone() }).collect();
        let x = gpu.upload(&logits.repeat(draws.len()), draws.len(), vocab).unwrap();
        let rows: Vec<usize> = (0..draws.len()).collect();
        let got = gpu.sample(&x, &head, &rows, &plans).unwrap();
        for (&u, &device) in draws.iter().zip(&got) {
            let host = sampler.sample_with_draw(&mut logits.clone(), &history, u);
            compared += 1;
            if device != host {
                let cdf = host_cdf(&sampler, &logits, &history);
                let boundary = cdf.iter().map(|&(_, at)| (at - u).abs()).fold(f64::INFINITY, f64::min);
                assert!(boundary < 1e-4, "{name}: u {u}: device {device}, host {host}, nearest boundary {boundary}");
                near_boundary += 1;
            }
        }
    }
    eprintln!("{compared} draws compared, {near_boundary} differed at a boundary");
    assert!(near_boundary * 100 <= compared, "{near_boundary} of {compared} draws differ");
}

#[test]
fn device_plans_follow_the_settings_and_advance_the_rng_as_sampling_does() {
    // Greedy decoding is top-k 1 after the adjustments, with no draw taken.
    let greedy = SamplingParams { temperature: 0.0, repeat_penalty: 1.2, seed: Some(5), ..SamplingParams::default() };
    let mut sampler = Sampler::new(greedy.clone()).unwrap();
    let plan = sampler.device_sampling(&[3]).unwrap();
    assert_eq!((plan.top_k, plan.temperature, plan.u, plan.adjust), (1, 1.0, 0.0, vec![(3, 1, 0.0)]));
    let untouched = Sampler::new(greedy).unwrap().device_sampling(&[]).unwrap();
    assert_eq!(sampler.device_sampling(&[]).unwrap().u, untouched.u);
    let all = SamplingParams { temperature: 1.0, top_k: 0, ..SamplingParams::default() };
    assert!(Sampler::new(all).unwrap().device_sampling(&[]).is_none(), "top-k 0 keeps the vocabulary: host only");
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 40,
        repeat_penalty: 1.1,
        logit_bias: vec![(9, 1.0), (4, -1.0), (9, 0.5)],
        seed: Some(3),
        ..SamplingParams::default()
    };
    let mut device = Sampler::new(params.clone()).unwrap();
    let mut host = Sampler::new(params).unwrap();
    let plan = device.device_sampling(&[4, 4, 7]).unwrap();
    // Bias first-seen order, then the penalty window's tokens; each token once.
    assert_eq!(plan.adjust, vec![(9, 0, 1.5), (4, 2, -1.0), (7, 1, 0.0)]);
    // The plan took one draw, as `sample` does: the next draws agree.
    let mut logits = vec![0.0f32, 1.0, 2.0];
    host.sample(&mut logits, &[]);
    let next = device.device_sampling(&[]).unwrap();
    assert_eq!(next.u, host.device_sampling(&[]).unwrap().u);
}

/// Seeded sampling through the generator on SmolLM2 on the GPU: drawn on the device (one id read
/// back per step) and from the logits read back to the host sampler, with the same seed, give the
/// same tokens (each step's draw is the same `u`; the logits are the same GPU's).
#[test]
fn generation_samples_on_the_device_as_the_host_would() {
    use minerva_generate::{Event, GenerateOptions, Session, Tokenizer};
    use minerva_model::Model;

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup` (this test never skips)", path.display());
    let tok = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(&path).unwrap()).unwrap();
    let prompt = tok.encode("<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n", true).unwrap();
    let run = |device_sampling: bool| -> Vec<u32> {
        let options = WgpuOptions { device_sampling, ..WgpuOptions::default() };
        let model = Model::load(&path, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
        assert_eq!(model.samples_on_device(), device_sampling);
        let mut session = Session::new(&model, &tok, 64).unwrap();
        let params = SamplingParams {
            temperature: 0.9,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.1,
            seed: Some(99),
            ..SamplingParams::default()
        };
        let options = GenerateOptions { max_tokens: 12, ignore_eos: true, ..GenerateOptions::default() };
        let events = session.generate(&prompt, options, Sampler::new(params).unwrap()).unwrap();
        let done = events.map(Result::unwrap).find_map(|e| if let Event::Done(s) = e { Some(s) } else { None });
        done.unwrap().tokens
    };
    let (device, host) = (run(true), run(false));
    assert_eq!(device.len(), 12);
    assert_eq!(device, host);
}
