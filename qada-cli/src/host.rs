//! What a measurement ran on and from: the commit, the CPU (as `/proc/cpuinfo` names it,
//! with family and model numbers), its SIMD features, the threads in use. `qada bench`
//! reports it and every `qada eval` record carries it.

use serde_json::{json, Value};

/// The commit HEAD pointed at when this binary was built (see `build.rs`), or `unknown`.
pub const COMMIT: &str = env!("QADA_GIT_COMMIT");

/// The CPU as `/proc/cpuinfo` names it, with its family and model numbers (hosts of one
/// product name differ: Zen 1 and Zen 3 EPYCs both say "AMD EPYC"), and the threads in use.
pub fn cpu_description() -> String {
    let name = cpu_name();
    let threads = rayon::current_num_threads();
    match (cpuinfo_field("cpu family"), cpuinfo_field("model")) {
        (Some(f), Some(m)) => format!("{name} (family {f}, model {m}), {threads} threads"),
        _ => format!("{name}, {threads} threads"),
    }
}

/// The CPU's product name (the architecture where `/proc/cpuinfo` has none).
fn cpu_name() -> String {
    cpuinfo_field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The first value of `key` in `/proc/cpuinfo` (its first processor), trimmed.
pub fn cpuinfo_field(key: &str) -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.split(':').next().map(str::trim) == Some(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The SIMD features of this CPU that a kernel could use (from `/proc/cpuinfo`'s flags), so
/// a record says what the host had besides what ran.
pub fn cpu_simd_flags() -> Vec<String> {
    const WANTED: [&str; 9] = [
        "avx2",
        "fma",
        "f16c",
        "avx_vnni",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "amx_tile",
        "amx_int8",
    ];
    let flags = cpuinfo_field("flags").unwrap_or_default();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    WANTED
        .iter()
        .filter(|w| flags.contains(w))
        .map(|w| w.to_string())
        .collect()
}

/// What names a run in its records: commit, qada's version, CPU (name, family, model),
/// threads, activations and cache type.
pub fn run_info(activations: &str, kv: &str) -> Value {
    json!({
        "commit": COMMIT,
        "version": env!("CARGO_PKG_VERSION"),
        "cpu": cpu_name(),
        "cpu_family": cpuinfo_field("cpu family"),
        "cpu_model": cpuinfo_field("model"),
        "threads": rayon::current_num_threads(),
        "activations": activations,
        "kv": kv,
    })
}
