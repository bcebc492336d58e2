//! Sampling and the generation loop.

use std::ops::ControlFlow;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::session::Session;
use crate::tokenizer::StreamDecoder;
use crate::{ModelError, Result};

/// How the next token is drawn from the logits.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 for greedy (argmax); otherwise logits are divided by it before the softmax.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Check the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(ModelError::Input(format!(
                "temperature must be a finite number >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(ModelError::Input(format!(
                "top-p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// Draws tokens from logits.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    probs: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler; the same seed gives the same tokens.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = StdRng::seed_from_u64(params.seed);
        Ok(Sampler {
            params,
            rng,
            probs: Vec::new(),
        })
    }

    /// The next token. NaN logits count as impossible; all impossible is an error.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        let finite = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
        let (best, best_v) = logits
            .iter()
            .enumerate()
            .map(|(i, &v)| (i, finite(v)))
            .fold((0, f32::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        if best_v == f32::NEG_INFINITY {
            return Err(ModelError::Input(
                "every logit is -inf or NaN: nothing to sample".into(),
            ));
        }
        if self.params.temperature == 0.0 {
            return Ok(best as u32);
        }
        let t = self.params.temperature;
        self.probs.clear();
        self.probs.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as u32, (finite(v) - best_v) / t)),
        );
        self.probs.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if self.params.top_k > 0 {
            self.probs.truncate(self.params.top_k);
        }
        let mut z = 0.0f64;
        for p in self.probs.iter_mut() {
            p.1 = p.1.exp();
            z += p.1 as f64;
        }
        let mut keep = self.probs.len();
        if self.params.top_p < 1.0 {
            let mut acc = 0.0f64;
            for (i, p) in self.probs.iter().enumerate() {
                acc += p.1 as f64 / z;
                if acc >= self.params.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        self.probs.truncate(keep);
        let total: f64 = self.probs.iter().map(|p| p.1 as f64).sum();
        let mut r = self.rng.gen::<f64>() * total;
        for p in &self.probs {
            r -= p.1 as f64;
            if r <= 0.0 {
                return Ok(p.0);
            }
        }
        Ok(self.probs.last().map_or(best as u32, |p| p.0))
    }
}

/// When generation stops.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateConfig {
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Stop at an end-of-generation token (not included in the output).
    pub stop_at_eos: bool,
    /// Stop when the text contains any of these (the text ends before it).
    pub stop_strings: Vec<String>,
    /// How tokens are drawn.
    pub sampling: SamplingParams,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (EOS or an end-of-turn token, see
    /// [`crate::Tokenizer::end_of_generation`]).
    Eos,
    /// `max_new_tokens` reached.
    MaxTokens,
    /// A stop string appeared.
    StopString,
    /// The context length is reached.
    ContextFull,
    /// The caller's `on_text` asked to stop ([`generate_until`]: Ctrl-C in Python, say).
    Interrupted,
}

impl StopReason {
    /// Short name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopString => "stop_string",
            StopReason::ContextFull => "context_full",
            StopReason::Interrupted => "interrupted",
        }
    }
}

/// The outcome of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Prompt token ids.
    pub prompt_ids: Vec<u32>,
    /// Generated token ids (EOS excluded).
    pub generated_ids: Vec<u32>,
    /// Generated text (up to a stop string).
    pub text: String,
    /// Why it stopped.
    pub stop: StopReason,
    /// Seconds spent in prefill.
    pub prefill_secs: f64,
    /// Seconds spent decoding.
    pub decode_secs: f64,
    /// Decoding steps run (tokens fed back through the model).
    pub decode_steps: usize,
}

/// Holds back streamed text that might be the start of a stop string.
struct StopFilter<'a> {
    stops: &'a [String],
    held: String,
}

impl StopFilter<'_> {
    /// Returns the text safe to emit and whether a stop string was found.
    fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        if let Some(at) = self
            .stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let mut keep = 0;
        for s in self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if self.held.ends_with(&s[..i]) {
                    keep = keep.max(i);
                }
            }
        }
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }
    fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Prefill `prompt`, then generate, calling `on_text` with every piece of text as it becomes
/// final and `progress(done, total)` during prefill.
pub fn generate(
    session: &mut Session<'_>,
    prompt: &[u32],
    cfg: &GenerateConfig,
    on_text: &mut dyn FnMut(&str),
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Generation> {
    let mut go_on = |piece: &str| {
        on_text(piece);
        ControlFlow::Continue(())
    };
    generate_until(session, prompt, cfg, &mut go_on, progress)
}

/// [`generate`], where `on_text` (called once per generated token, with the text that became
/// final, possibly empty) may stop generation by returning `ControlFlow::Break`: the result
/// then holds the tokens so far and [`StopReason::Interrupted`].
pub fn generate_until(
    session: &mut Session<'_>,
    prompt: &[u32],
    cfg: &GenerateConfig,
    on_text: &mut dyn FnMut(&str) -> ControlFlow<()>,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Generation> {
    Sampler::new(cfg.sampling.clone())?;
    let t0 = Instant::now();
    session.prefill(prompt, progress)?;
    let prefill_secs = t0.elapsed().as_secs_f64();
    generate_after_prefill(session, prompt, prefill_secs, cfg, on_text)
}

/// [`generate_until`] from a session that has already prefilled `prompt` (or was restored to
/// a checkpoint taken right after): the first token is sampled from the session's logits.
/// `prefill_secs` is reported as given. Comparing criteria on one prompt is then one prefill,
/// a [`Session::checkpoint`], and a [`Session::restore`] before each generation.
pub fn generate_after_prefill(
    session: &mut Session<'_>,
    prompt: &[u32],
    prefill_secs: f64,
    cfg: &GenerateConfig,
    on_text: &mut dyn FnMut(&str) -> ControlFlow<()>,
) -> Result<Generation> {
    let mut sampler = Sampler::new(cfg.sampling.clone())?;
    let model = session.model_handle();
    let tok = &model.tokenizer;
    let end = tok.end_of_generation();
    let mut next = sampler.sample(session.logits())?;
    let mut decoder = StreamDecoder::new();
    let mut filter = StopFilter {
        stops: &cfg.stop_strings,
        held: String::new(),
    };
    let mut generated = Vec::new();
    let mut text = String::new();
    let mut steps = 0;
    let t1 = Instant::now();
    let stop = loop {
        if generated.len() >= cfg.max_new_tokens {
            break StopReason::MaxTokens;
        }
        if cfg.stop_at_eos && end.contains(&next) {
            break StopReason::Eos;
        }
        generated.push(next);
        let (piece, stopped) = filter.push(&decoder.push(tok, next));
        let flow = on_text(&piece);
        text.push_str(&piece);
        if stopped {
            break StopReason::StopString;
        }
        if flow.is_break() {
            break StopReason::Interrupted;
        }
        if generated.len() >= cfg.max_new_tokens {
            break StopReason::MaxTokens;
        }
        if session.len() >= session.capacity() {
            break StopReason::ContextFull;
        }
        next = sampler.sample(session.step(next)?)?;
        steps += 1;
    };
    if stop != StopReason::StopString {
        let (rest, _) = filter.push(&decoder.finish());
        let rest = rest + &filter.finish();
        // the generation ends here whatever the caller answers
        let _ = on_text(&rest);
        text.push_str(&rest);
    }
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        generated_ids: generated,
        text,
        stop,
        prefill_secs,
        decode_secs: t1.elapsed().as_secs_f64(),
        decode_steps: steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_argmax_and_ignores_nan() {
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        assert_eq!(s.sample(&[0.1, f32::NAN, 3.0, 2.0]).unwrap(), 2);
        assert!(s.sample(&[f32::NAN, f32::NEG_INFINITY]).is_err());
    }

    #[test]
    fn same_seed_same_tokens_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let p = SamplingParams {
            temperature: 0.9,
            top_k: 0,
            top_p: 0.95,
            seed: 42,
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(p.clone()).unwrap();
            (0..20).map(|_| s.sample(&logits).unwrap()).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(p.clone()).unwrap();
            (0..20).map(|_| s.sample(&logits).unwrap()).collect()
        };
        assert_eq!(a, b);
        let mut s = Sampler::new(SamplingParams { top_k: 1, ..p }).unwrap();
        let best = Sampler::new(SamplingParams::default())
            .unwrap()
            .sample(&logits)
            .unwrap();
        assert!((0..10).all(|_| s.sample(&logits).unwrap() == best));
    }

    #[test]
    fn bad_parameters_are_errors() {
        for p in [
            SamplingParams {
                temperature: -1.0,
                ..Default::default()
            },
            SamplingParams {
                temperature: f32::NAN,
                ..Default::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..Default::default()
            },
            SamplingParams {
                top_p: 1.5,
                ..Default::default()
            },
        ] {
            assert!(Sampler::new(p).is_err());
        }
    }

    #[test]
    fn stop_filter_holds_back_a_possible_stop_string() {
        let stops = vec!["<END>".to_string()];
        let mut f = StopFilter {
            stops: &stops,
            held: String::new(),
        };
        assert_eq!(f.push("hello <E"), ("hello ".to_string(), false));
        assert_eq!(f.push("N"), (String::new(), false));
        assert_eq!(f.push("D> more"), (String::new(), true));
        let mut f = StopFilter {
            stops: &stops,
            held: String::new(),
        };
        assert_eq!(f.push("a <Ex"), ("a <Ex".to_string(), false));
    }
}
