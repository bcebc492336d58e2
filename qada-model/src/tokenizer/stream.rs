//! Streaming decode: text as token ids come, never splitting a UTF-8 character.

use super::Tokenizer;

/// Turns token ids into text as they come, never splitting a UTF-8 character.
#[derive(Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        if let Some(b) = tok.token_bytes(id) {
            self.pending.extend_from_slice(b);
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // an incomplete character at the end: wait for more bytes
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        // bytes that can never become valid: replace them and go on
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
        out
    }

    /// Whatever is left at the end of the stream (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}
