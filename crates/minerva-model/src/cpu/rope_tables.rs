//! The rotation tables of the current step, kept for all its layers: every layer rotates its
//! queries and keys by the same positions, and a prefill's table (tokens × pairs of `sin_cos`)
//! computed anew for each of those calls cost as much as a few layers' norms and adds.

use std::sync::Mutex;

use crate::checks;
use crate::rope::RopeConfig;

/// Tables kept: two, for models whose layers alternate two RoPE settings (Gemma 3's local and
/// global layers).
const KEPT: usize = 2;

/// The last [`KEPT`] tables, the least recently used first.
#[derive(Default)]
pub(super) struct RopeTables {
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    rope: RopeConfig,
    positions: Vec<u32>,
    table: Vec<f32>,
    inv_freq: Vec<f32>,
}

impl RopeTables {
    /// `f` of [`checks::rope_table`]`(positions, rope)`, computed only if not kept from an
    /// earlier call with the same positions and settings.
    pub(super) fn with<R>(&self, positions: &[u32], rope: &RopeConfig, f: impl FnOnce(&[f32]) -> R) -> R {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.iter().position(|e| e.rope == *rope && e.positions == positions) {
            Some(i) => entries[i..].rotate_left(1),
            None => {
                if entries.len() < KEPT {
                    entries.push(Entry {
                        rope: rope.clone(),
                        positions: Vec::new(),
                        table: Vec::new(),
                        inv_freq: Vec::new(),
                    });
                } else {
                    entries.rotate_left(1);
                }
                let entry = entries.last_mut().expect("an entry was just made or kept");
                entry.rope.clone_from(rope);
                entry.positions.clear();
                entry.positions.extend_from_slice(positions);
                checks::rope_table_into(positions, rope, &mut entry.table, &mut entry.inv_freq);
            }
        }
        f(&entries.last().expect("the entry used").table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rope::{RopeScaling, RopeStyle};

    fn rope(base: f32) -> RopeConfig {
        RopeConfig { style: RopeStyle::NeoX, base, dim: 8, scaling: RopeScaling::None }
    }

    /// Alternating two settings, and moving on to new positions, always gives the table of the
    /// call's own positions and settings.
    #[test]
    fn kept_tables_are_those_of_the_call() {
        let tables = RopeTables::default();
        let (local, global) = (rope(10_000.0), rope(1_000_000.0));
        for step in 0..4u32 {
            let positions: Vec<u32> = (step..step + 3).collect();
            for _layer in 0..3 {
                for setting in [&local, &global] {
                    let want = checks::rope_table(&positions, setting);
                    tables.with(&positions, setting, |got| assert_eq!(got, &want[..], "step {step}"));
                }
            }
        }
        assert_eq!(tables.entries.lock().unwrap().len(), KEPT);
    }
}
