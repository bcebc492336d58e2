//! `qada inspect`: metadata and tensors of a GGUF file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use qada_model::gguf::GgufFile;
use qada_model::ModelConfig;

use crate::common::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (a path, or a short name such as smollm2-135m or gemma3-270m).
    file: PathBuf,
    /// List every tensor (default: a summary by type).
    #[arg(long)]
    tensors: bool,
}

pub fn run(a: Args) -> CliResult<()> {
    let file = crate::common::resolve_model(Some(&a.file))?;
    let f = GgufFile::open(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    println!(
        "file: {} (GGUF v{}, alignment {})",
        file.display(),
        f.version,
        f.alignment
    );
    println!("metadata ({} keys):", f.metadata().len());
    for (k, v) in f.metadata() {
        let r = v.render(6);
        let r = if r.chars().count() > 160 {
            format!("{}...", r.chars().take(157).collect::<String>())
        } else {
            r
        };
        println!("  {k} = {r}");
    }
    match ModelConfig::from_gguf(&f) {
        Ok(c) => {
            println!(
                "model: {} family, {} layers, width {}, {} heads over {} KV heads of dimension {}, MLP {}, context {}, rope base {}, vocabulary {}",
                c.family.name, c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.context_length, c.rope_base, c.vocab_size
            );
            if let Some(w) = c.sliding_window() {
                let global: Vec<String> = c.global_layers().map(|l| l.to_string()).collect();
                let local_base = c.layers.iter().find_map(|l| l.local_rope_base);
                println!(
                    "  global layers {} (the criterion decides there); the others attend to the last {w} tokens, rope base {}",
                    global.join(", "),
                    local_base.unwrap_or(c.rope_base)
                );
            }
            if c.rope_dim != c.head_dim {
                println!(
                    "  RoPE on the first {} of {} dimensions",
                    c.rope_dim, c.head_dim
                );
            }
            if c.rope_scaling != qada_model::RopeScaling::None {
                println!("  RoPE scaling: {:?}", c.rope_scaling);
            }
            let nope: Vec<String> = (0..c.n_layers)
                .filter(|&l| !c.layers[l].rotary)
                .map(|l| l.to_string())
                .collect();
            if !nope.is_empty() {
                println!("  no RoPE on layers {}", nope.join(", "));
            }
            for (what, cap) in [("scores", c.attn_softcap), ("logits", c.final_softcap)] {
                if let Some(cap) = cap {
                    println!("  {what} soft-capped at {cap}");
                }
            }
        }
        Err(e) => println!("model: not loadable by this build: {e}"),
    }
    let total: u64 = f.tensors().iter().map(|t| t.n_bytes).sum();
    let params: u64 = f.tensors().iter().map(|t| t.n_elements).sum();
    println!(
        "tensors: {} holding {params} values in {:.1} MiB",
        f.tensors().len(),
        total as f64 / (1 << 20) as f64
    );
    let mut by_type: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for t in f.tensors() {
        let e = by_type.entry(t.ty.to_string()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    for (ty, (n, bytes)) in by_type {
        println!(
            "  {ty}: {n} tensors, {:.1} MiB",
            bytes as f64 / (1 << 20) as f64
        );
    }
    if a.tensors {
        for t in f.tensors() {
            println!(
                "  {:<32} {:>6} {:?} {} bytes at +{}",
                t.name,
                t.ty.to_string(),
                t.dims,
                t.n_bytes,
                t.offset
            );
        }
    }
    Ok(())
}
