//! The server's counters and gauges, rendered in the Prometheus text format (`/metrics`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters (only grow) and gauges (the current value), shared by every request.
#[derive(Default)]
pub struct Metrics {
    /// Requests answered, by endpoint and status.
    requests: Mutex<Vec<((&'static str, u16), u64)>>,
    /// Generations running now (sessions in use).
    pub active: AtomicU64,
    /// Requests waiting for a session.
    pub queued: AtomicU64,
    /// Sessions kept idle for their prefix.
    pub idle: AtomicU64,
    /// Bytes of K/V the kept and running sessions hold.
    pub cache_bytes: AtomicU64,
    /// Prompt tokens of all generations.
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens restored from the prefix cache instead of prefilled.
    pub cached_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Generations stopped because their client went away.
    pub disconnects: AtomicU64,
    /// Idle sessions dropped to stay within the memory bound.
    pub evictions: AtomicU64,
    /// Seconds spent prefilling, in microseconds.
    pub prefill_us: AtomicU64,
    /// Seconds spent decoding, in microseconds.
    pub decode_us: AtomicU64,
}

impl Metrics {
    /// Count an answer of `status` to `endpoint`.
    pub fn answered(&self, endpoint: &'static str, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        match r.iter_mut().find(|(k, _)| *k == (endpoint, status)) {
            Some((_, n)) => *n += 1,
            None => r.push(((endpoint, status), 1)),
        }
    }

    /// The text format, with the process's resident memory.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{value}");
        };
        let requests = {
            let r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
            let mut lines: Vec<String> = r
                .iter()
                .map(|((e, st), n)| {
                    format!("qada_requests_total{{endpoint=\"{e}\",status=\"{st}\"}} {n}")
                })
                .collect();
            lines.sort();
            lines.join("\n")
        };
        if !requests.is_empty() {
            metric(
                "qada_requests_total",
                "counter",
                "Requests answered, by endpoint and status.",
                requests,
            );
        }
        let get = |a: &AtomicU64| a.load(Relaxed);
        for (name, kind, help, v) in [
            (
                "qada_active_sessions",
                "gauge",
                "Generations running now.",
                get(&self.active),
            ),
            (
                "qada_queued_requests",
                "gauge",
                "Requests waiting for a session.",
                get(&self.queued),
            ),
            (
                "qada_idle_sessions",
                "gauge",
                "Sessions kept for their prompt prefix.",
                get(&self.idle),
            ),
            (
                "qada_cache_bytes",
                "gauge",
                "K/V bytes held by running and kept sessions.",
                get(&self.cache_bytes),
            ),
            (
                "qada_prompt_tokens_total",
                "counter",
                "Prompt tokens of all generations.",
                get(&self.prompt_tokens),
            ),
            (
                "qada_cached_prompt_tokens_total",
                "counter",
                "Prompt tokens restored from the prefix cache.",
                get(&self.cached_tokens),
            ),
            (
                "qada_generated_tokens_total",
                "counter",
                "Tokens generated.",
                get(&self.generated_tokens),
            ),
            (
                "qada_client_disconnects_total",
                "counter",
                "Generations stopped because the client went away.",
                get(&self.disconnects),
            ),
            (
                "qada_prefix_evictions_total",
                "counter",
                "Kept sessions dropped to stay within --cache-mb.",
                get(&self.evictions),
            ),
        ] {
            metric(name, kind, help, format!("{name} {v}"));
        }
        for (name, help, v) in [
            (
                "qada_prefill_seconds_total",
                "Seconds spent prefilling prompts.",
                get(&self.prefill_us),
            ),
            (
                "qada_decode_seconds_total",
                "Seconds spent decoding.",
                get(&self.decode_us),
            ),
        ] {
            metric(
                name,
                "counter",
                help,
                format!("{name} {:.6}", v as f64 / 1e6),
            );
        }
        if let Some(rss) = resident_bytes() {
            metric(
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory of the server process.",
                format!("process_resident_memory_bytes {rss}"),
            );
        }
        s
    }
}

/// The process's resident set in bytes (Linux: `/proc/self/statm`, in pages of 4 KiB).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_help_type_and_labelled_counts() {
        let m = Metrics::default();
        m.answered("chat", 200);
        m.answered("chat", 200);
        m.answered("completions", 429);
        m.active.store(2, Relaxed);
        let text = m.render();
        assert!(text.contains("qada_requests_total{endpoint=\"chat\",status=\"200\"} 2"));
        assert!(text.contains("qada_requests_total{endpoint=\"completions\",status=\"429\"} 1"));
        assert!(text.contains("# TYPE qada_active_sessions gauge\nqada_active_sessions 2"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(
                name.starts_with("qada_") || name.starts_with("process_"),
                "{line}"
            );
        }
    }
}
