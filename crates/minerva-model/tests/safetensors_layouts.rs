//! SafeTensors checkpoints as they come from the Hub: bf16 weights, split over shards with a
//! `model.safetensors.index.json`. The tiny LLaMA fixture's weights are rounded to bf16 and written
//! twice — as bf16 in two shards with an index, and as f32 (the same rounded values) in one file —
//! and both load and give the same logits: the bf16 kernels widen each weight exactly, so only
//! the summation order may differ (bound 1e-5 relative).

use std::collections::BTreeMap;
use std::path::Path;

use half::bf16;
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_safetensors::Checkpoint;
use serde_json::{Value, json};

/// Writes `tensors` (name, dtype, shape, bytes) as one `.safetensors` file.
fn write_safetensors(path: &Path, tensors: &[(String, &str, Vec<usize>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
        );
        offset += bytes.len();
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&text);
    tensors.iter().for_each(|t| file.extend_from_slice(&t.3));
    std::fs::write(path, file).unwrap();
}

fn logits(dir: &Path, tokens: &[u32]) -> Vec<f32> {
    let model = Model::load(dir, CpuBackend::new(None).unwrap()).unwrap();
    let mut cache = model.new_cache(1, tokens.len()).unwrap();
    model.forward(&mut cache, &[SequenceInput { tokens, start_pos: 0, slot: 0 }], LogitsFor::All).unwrap().data
}

#[test]
fn bf16_shards_with_an_index_equal_f32_of_the_same_values() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/model/tiny/llama");
    let ckpt = Checkpoint::open(&src).unwrap();
    let (sharded, single) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [&sharded, &single] {
        std::fs::copy(src.join("config.json"), dir.path().join("config.json")).unwrap();
    }
    let mut as_bf16 = Vec::new();
    let mut as_f32 = Vec::new();
    for t in ckpt.tensors() {
        let rounded: Vec<bf16> = t
            .view
            .bytes
            .chunks_exact(4)
            .map(|b| bf16::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect();
        let shape = t.view.shape.to_vec();
        as_bf16.push((
            t.view.name.to_string(),
            "BF16",
            shape.clone(),
            rounded.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
        as_f32.push((
            t.view.name.to_string(),
            "F32",
            shape,
            rounded.iter().flat_map(|v| v.to_f32().to_le_bytes()).collect(),
        ));
    }
    write_safetensors(&single.path().join("model.safetensors"), &as_f32);
    // Two shards, the layers split between them, and the index naming each tensor's shard.
    let (first, second): (Vec<_>, Vec<_>) = as_bf16.into_iter().partition(|t| !t.0.starts_with("model.layers.1."));
    let mut weight_map = BTreeMap::new();
    for (file, part) in [("model-00001-of-00002.safetensors", &first), ("model-00002-of-00002.safetensors", &second)] {
        assert!(!part.is_empty());
        write_safetensors(&sharded.path().join(file), part);
        for t in part {
            weight_map.insert(t.0.clone(), file);
        }
    }
    let index = json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(sharded.path().join("model.safetensors.index.json"), index.to_string()).unwrap();

    let tokens: Vec<u32> = (3..40).step_by(3).collect();
    let expected = logits(single.path(), &tokens);
    for path in [sharded.path().to_path_buf(), sharded.path().join("model.safetensors.index.json")] {
        let got = logits(&path, &tokens);
        let scale = expected.iter().map(|v| v.abs()).fold(0.0, f32::max);
        let err = got.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max) / scale;
        println!("{}: bf16 shards vs f32 single file, max relative difference {err:e}", path.display());
        assert!(err <= 1e-5, "{err}");
    }
}
