//! `qada bench`'s tables on stdout, from the rows `--json` prints.

use super::{n_modes, Args, MODES};

/// What the whole run shares, printed above the tables.
pub struct Header<'a> {
    pub cpu: &'a str,
    pub kernels: &'a [&'a str],
    pub cpu_flags: &'a [String],
    pub activations: &'a str,
    pub adaptive: &'a str,
    pub bandwidth: f64,
}

/// The speed table per depth, then the decision-cost and ceiling tables when asked for.
pub fn print_tables(a: &Args, h: &Header<'_>, results: &[serde_json::Value]) {
    let (cpu, kernels, cpu_flags) = (h.cpu, h.kernels, h.cpu_flags);
    println!("CPU: {cpu}");
    println!(
        "kernels: {} (the CPU has: {})",
        kernels.join(", "),
        cpu_flags.join(" ")
    );
    println!(
        "{} activations, {} K/V; prefill tokens/s of {} tokens after the depth (dense); decode tokens/s, median of {} runs of {} tokens (range); adaptive = {}; read bandwidth {:.1} GB/s",
        h.activations,
        a.criterion.kv,
        a.pp,
        a.reps,
        a.new_tokens,
        h.adaptive,
        h.bandwidth / 1e9
    );
    println!(
        "{:>6} | {:>8} | {:>22} | {:>22} | {:>7} | {:>8} | {:>9} | {:>9} | {:>9} | {:>9}",
        "depth",
        format!("pp{}", a.pp),
        "dense",
        "adaptive",
        "speedup",
        "sparsity",
        "MB/tok d",
        "MB/tok a",
        "limit d",
        "limit a"
    );
    for r in results {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let range = |k: &str| {
            format!(
                "({:.1}-{:.1})",
                r[k][0].as_f64().unwrap_or(f64::NAN),
                r[k][1].as_f64().unwrap_or(f64::NAN)
            )
        };
        let pp = match r["prefill_tokens_per_s"].as_f64() {
            Some(v) if a.pp > 0 => format!("{v:.1}"),
            _ => "-".to_string(),
        };
        println!(
            "{:>6} | {:>8} | {:>7.1} {:>14} | {:>7.1} {:>14} | {:>6.2}x | {:>8.3} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1}",
            r["depth"].as_u64().unwrap_or(0),
            pp,
            f("dense_decode_tokens_per_s"),
            range("dense_range"),
            f("adaptive_decode_tokens_per_s"),
            range("adaptive_range"),
            f("speedup"),
            f("sparsity"),
            f("dense_bytes_per_token") / 1e6,
            f("adaptive_bytes_per_token") / 1e6,
            f("dense_limit_tokens_per_s"),
            f("adaptive_limit_tokens_per_s")
        );
    }
    print_phases(a, results);
    if a.decision_cost {
        println!(
            "decision cost: the criterion decides (and chooses pages), then every head attends \
             densely; its time less dense's, per token and as a share of an adaptive step"
        );
        println!(
            "{:>6} | {:>16} | {:>12} | {:>9}",
            "depth", "decide+dense t/s", "ms/tok", "share"
        );
        for r in results {
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            println!(
                "{:>6} | {:>16.1} | {:>12.3} | {:>8.1}%",
                r["depth"].as_u64().unwrap_or(0),
                f("decide_then_dense_tokens_per_s"),
                f("decision_secs_per_token") * 1e3,
                f("decision_share_of_adaptive_step") * 100.0
            );
        }
    }
    if a.ceiling {
        println!(
            "oracle at tau {} (untimed): the bytes an exact, free criterion would read",
            a.criterion.tau()
        );
        println!(
            "{:>6} | {:>8} | {:>9} | {:>9} | {:>16}",
            "depth", "sparsity", "MB/tok o", "limit o", "ceiling speedup"
        );
        for r in results {
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            println!(
                "{:>6} | {:>8.3} | {:>9.1} | {:>9.1} | {:>15.2}x",
                r["depth"].as_u64().unwrap_or(0),
                f("oracle_sparsity"),
                f("oracle_bytes_per_token") / 1e6,
                f("oracle_limit_tokens_per_s"),
                f("ceiling_speedup")
            );
        }
    }
}

/// Where a step's time goes, per depth and mode: the attention of the layers a criterion
/// decides, by phase, measured inside the step, and the rest of the step.
fn print_phases(a: &Args, results: &[serde_json::Value]) {
    println!(
        "a step's time, ms a token (mean of the runs): attention of the decided layers by phase, \
         measured inside the step (decide: decisions and page choice; select: its part in the \
         criterion, the slowest KV group's where they run in parallel), and the rest (weights, \
         norms, sliding layers, sampling)"
    );
    println!(
        "{:>6} | {:>17} | {:>7} | {:>7} | {:>7} | {:>7} | {:>7} | {:>7} | {:>7}",
        "depth", "mode", "step", "local", "decide", "select", "bulk", "merge", "rest"
    );
    for r in results {
        for name in MODES.iter().take(n_modes(a)) {
            let ph = &r[format!("{name}_attention_ms_per_token")];
            let f = |k: &str| ph[k].as_f64().unwrap_or(f64::NAN);
            let step = r[format!("{name}_ms_per_token")]
                .as_f64()
                .unwrap_or(f64::NAN);
            println!(
                "{:>6} | {:>17} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2}",
                r["depth"].as_u64().unwrap_or(0),
                name,
                step,
                f("local"),
                f("decide"),
                f("select"),
                f("bulk"),
                f("merge"),
                step - f("total")
            );
        }
    }
}
