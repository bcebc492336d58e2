//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`): Gemma 3's tokenizer against the shared
//! reference (token ids of every case and prompt, decoding, the family's chat template), round
//! trips of arbitrary text, and a small SentencePiece vocabulary written by the test: its exact
//! ids, and hostile variants that must give an error saying what is wrong, never a panic.
//!
//! The model is fetched by `bash scripts/setup.sh --model gemma3-270m`.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use proptest::prelude::*;
use qada_model::gguf::writer::GgufWriter;
use qada_model::gguf::{GgufFile, Value, ValueType};
use qada_model::{ChatFormat, ModelError, StreamDecoder, TemplateOrigin, Tokenizer};
use serde_json::Value as Json;

fn model_path() -> PathBuf {
    common::fetched_model("gemma3-270m")
}

fn gemma() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let f = GgufFile::open(&model_path()).unwrap();
        let t0 = Instant::now();
        let tok = Tokenizer::from_gguf(&f).unwrap();
        eprintln!("Tokenizer::from_gguf on Gemma 3: {:?}", t0.elapsed());
        tok
    })
}

fn reference() -> &'static Json {
    static R: OnceLock<Json> = OnceLock::new();
    R.get_or_init(|| common::shared_reference("gemma-3-270m.json"))
}

#[test]
fn token_ids_equal_the_reference_for_every_case_and_prompt() {
    common::check_token_ids(gemma(), reference());
}

#[test]
fn ids_without_bos_are_the_continuation_encoding() {
    let tok = gemma();
    for case in reference()["tokenizer_cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids = tok.encode_continuation(text).unwrap();
        assert_eq!(
            ids,
            common::ids(&case["ids_no_bos"]),
            "case {}",
            case["name"]
        );
        assert_eq!(tok.decode(&ids), text, "case {}", case["name"]);
    }
}

#[test]
fn the_vocabulary_and_its_specials_come_from_the_file() {
    let tok = gemma();
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!((tok.bos(), tok.eos()), (Some(2), Some(1)));
    assert!(tok.adds_bos());
    assert_eq!(tok.pre_tokenizer(), "default");
    assert!(tok.is_special(2) && tok.is_special(105) && tok.is_special(106));
    assert!(
        !tok.is_special(107),
        "newline runs are user-defined, not control"
    );
    assert_eq!(tok.encode("").unwrap(), vec![2]);
    assert_eq!(tok.decode(&[2]), "");
    // a BOS that is not leading is text like any control token
    assert_eq!(tok.decode(&[2, 2364, 2]), "user<bos>");
    assert!(tok
        .unrepresentable("\u{14}\u{0} any byte at all")
        .is_empty());
}

#[test]
fn gemma_control_tokens_written_in_text_are_parsed_as_specials() {
    let tok = gemma();
    let text = "<start_of_turn>user\nhi<end_of_turn>\n<eos>";
    let ids = tok.encode(text).unwrap();
    assert_eq!(ids, [2, 105, 2364, 107, 2202, 106, 107, 1]);
    assert_eq!(tok.decode(&ids), text);
}

#[test]
fn whitespace_runs_are_cut_out_longest_first() {
    let tok = gemma();
    // two spaces are one user-defined token, and the word after it has no U+2581
    assert_eq!(tok.encode("  indented").unwrap(), [2, 138, 724, 16764]);
    // 40 spaces: 31, then 9
    let ids = tok.encode_continuation(&" ".repeat(40)).unwrap();
    let runs: Vec<String> = ids.iter().map(|&i| tok.token_str(i).unwrap()).collect();
    assert_eq!(runs, [" ".repeat(31), " ".repeat(9)]);
    // a lone space before a word is U+2581, part of the word's piece
    assert_eq!(
        tok.token_str(tok.encode_continuation(" the").unwrap()[0])
            .unwrap(),
        "▁the"
    );
}

#[test]
fn digits_are_single_tokens_and_unknown_characters_fall_back_to_bytes() {
    let tok = gemma();
    let ids = tok.encode_continuation("12345").unwrap();
    assert_eq!(ids.len(), 5);
    // U+10FFFD (private use) has no piece: four byte tokens
    let ids = tok.encode_continuation("\u{10FFFD}").unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| tok.token_str(i).unwrap()).collect();
    assert_eq!(pieces, ["<0xF4>", "<0x8F>", "<0xBF>", "<0xBD>"]);
    assert_eq!(tok.decode(&ids), "\u{10FFFD}");
}

#[test]
fn a_file_without_a_template_gets_gemma_3s_published_one() {
    let tok = gemma();
    let chat = tok.chat_template().expect("the gemma3 family's template");
    assert_eq!(
        chat.origin(),
        &TemplateOrigin::FamilyDefault {
            architecture: "gemma3".into(),
            format: ChatFormat::Gemma,
        }
    );
    assert!(chat.to_string().contains("gemma3 family"), "{chat}");
    let prompt = &reference()["prompts"][1];
    assert_eq!(prompt["name"], "chat");
    let rendered = chat
        .render_user(
            "What is the capital of France? Answer in one sentence.",
            None,
        )
        .unwrap();
    assert_eq!(rendered, prompt["text"].as_str().unwrap());
    assert_eq!(
        tok.encode(&rendered).unwrap(),
        common::ids(&prompt["token_ids"])
    );
    // a system message opens the first user turn, followed by a blank line; the user message
    // is trimmed, as the official template does
    assert_eq!(
        chat.render_user("  hi\n", Some("Be brief.")).unwrap(),
        "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn streaming_decode_reassembles_byte_fallback_characters() {
    let tok = gemma();
    let text = "Héllo wörld — 日本語 \u{10FFFD} 🎉  x\n\n";
    let ids = tok.encode_continuation(text).unwrap();
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids {
        let piece = dec.push(tok, id);
        assert!(!piece.contains('\u{fffd}'), "split character in {piece:?}");
        out.push_str(&piece);
    }
    out.push_str(&dec.finish());
    assert_eq!(out, text);
}

// ---- a small SentencePiece vocabulary written by the test ----

const C: i32 = 3; // control
const U: i32 = 4; // user-defined
const N: i32 = 1; // normal
const B: i32 = 6; // byte

/// `(piece, score, type)` of the small vocabulary: specials, user-defined runs, the 256 bytes,
/// single characters, then a few merged pieces (scores as SentencePiece gives them: merged
/// pieces in the order they were learned, before single characters).
fn small_pieces() -> Vec<(String, f32, i32)> {
    let mut v: Vec<(String, f32, i32)> = Vec::new();
    for s in [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<start_of_turn>",
        "<end_of_turn>",
    ] {
        v.push((s.into(), -1000.0, C));
    }
    for s in ["\n", "\n\n", "  ", "   ", "<b>"] {
        v.push((s.into(), -1000.0, U));
    }
    for b in 0..=255u8 {
        v.push((format!("<0x{b:02X}>"), 0.0, B));
    }
    for (i, s) in ["▁t", "he", "▁the", "in", "ing", "▁a"].iter().enumerate() {
        v.push((s.to_string(), -(i as f32), N));
    }
    let singles = "▁abcdefghijklmnopqrstuvwxyz.,0123456789";
    for (i, c) in singles.chars().enumerate() {
        v.push((c.to_string(), -100.0 - i as f32, N));
    }
    v
}

fn id_of(piece: &str) -> u32 {
    small_pieces().iter().position(|p| p.0 == piece).unwrap() as u32
}

/// A GGUF file holding the vocabulary's metadata; `edit` changes it before writing.
fn small_file(edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> GgufFile {
    let pieces = small_pieces();
    let mut meta: Vec<(&'static str, Value)> = vec![
        ("general.architecture", Value::String("gemma3".into())),
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.pre", Value::String("default".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(
                ValueType::String,
                pieces.iter().map(|p| Value::String(p.0.clone())).collect(),
            ),
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(
                ValueType::F32,
                pieces.iter().map(|p| Value::F32(p.1)).collect(),
            ),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(
                ValueType::I32,
                pieces.iter().map(|p| Value::I32(p.2)).collect(),
            ),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(2)),
        ("tokenizer.ggml.eos_token_id", Value::U32(1)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(3)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
    ];
    edit(&mut meta);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.meta(k, v);
    }
    GgufFile::parse(w.to_bytes()).unwrap()
}

fn small() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::from_gguf(&small_file(|_| {})).unwrap())
}

#[test]
fn the_small_vocabulary_merges_by_the_joined_pieces_score() {
    let tok = small();
    let ids = |pieces: &[&str]| -> Vec<u32> {
        std::iter::once(2)
            .chain(pieces.iter().map(|p| id_of(p)))
            .collect()
    };
    // "▁t" (score 0) joins before "he" (-1); "▁t" + "h" is no piece, so "the" stays apart...
    assert_eq!(
        tok.encode("the thing").unwrap(),
        ids(&["t", "he", "▁t", "h", "ing"])
    );
    // ...but "▁t" + "he" is "▁the"
    assert_eq!(tok.encode("the the").unwrap(), ids(&["t", "he", "▁the"]));
    // added tokens cut out whole, longest first; a character without a piece becomes bytes
    assert_eq!(
        tok.encode("a   b\n\n<b>é<end_of_turn>").unwrap(),
        ids(&[
            "a",
            "   ",
            "b",
            "\n\n",
            "<b>",
            "<0xC3>",
            "<0xA9>",
            "<end_of_turn>"
        ])
    );
    let text = "a   b\n\n<b>é<end_of_turn> the thing";
    assert_eq!(tok.decode(&tok.encode(text).unwrap()), text);
    assert!(tok.is_special(id_of("<end_of_turn>")) && !tok.is_special(id_of("<b>")));
}

#[test]
fn without_add_bos_no_bos_is_added_or_dropped() {
    let f = small_file(|m| {
        m.retain(|(k, _)| *k != "tokenizer.ggml.add_bos_token");
    });
    let tok = Tokenizer::from_gguf(&f).unwrap();
    assert!(!tok.adds_bos());
    assert_eq!(tok.encode("a").unwrap(), [id_of("a")]);
    assert_eq!(tok.decode(&[2, id_of("a")]), "<bos>a");
}

#[test]
fn a_file_template_wins_over_the_family_default() {
    let f = small_file(|m| {
        m.push((
            "tokenizer.chat_template",
            Value::String("{{ '<|im_start|>' + role }}{{ '<|im_end|>' }}".into()),
        ))
    });
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let chat = tok.chat_template().unwrap();
    assert_eq!(chat.origin(), &TemplateOrigin::File);
    let f = small_file(|m| m[0].1 = Value::String("llama".into()));
    assert!(Tokenizer::from_gguf(&f).unwrap().chat_template().is_none());
    // Gemma's turns in a file's template (the official one renders `<bos>` itself; `encode`
    // adds it here, so the rendering has none)
    let f = small_file(|m| {
        m.push((
            "tokenizer.chat_template",
            Value::String(
                "{{ bos_token }}{% for m in messages %}{{ '<start_of_turn>' + m.role + '\\n' + \
                 m.content + '<end_of_turn>\\n' }}{% endfor %}"
                    .into(),
            ),
        ))
    });
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let chat = tok.chat_template().unwrap();
    assert_eq!(chat.origin(), &TemplateOrigin::File);
    assert_eq!(chat.to_string(), "the file's own (tokenizer.chat_template)");
    let rendered = chat.render_user("a", None).unwrap();
    assert_eq!(rendered, "<start_of_turn>user\na<end_of_turn>\n");
    let ids = tok.encode(&rendered).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 1, "one BOS");
    // a template minijinja cannot compile leaves the model usable, and says why
    let f = small_file(|m| m.push(("tokenizer.chat_template", Value::String("{% for %}".into()))));
    let tok = Tokenizer::from_gguf(&f).unwrap();
    assert!(tok.chat_template().is_none());
    let why = tok.chat_template_problem().unwrap();
    assert!(
        why.contains("tokenizer.chat_template") && why.contains("--raw"),
        "{why}"
    );
}

#[test]
fn the_fuzzing_seed_holds_the_small_vocabulary() {
    let p = common::repo_root().join("fuzz/seeds/gguf/spm_vocab.gguf");
    let tok = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap();
    for text in ["the the thing", "a   b\n\n<b>é<end_of_turn>"] {
        assert_eq!(tok.encode(text).unwrap(), small().encode(text).unwrap());
    }
}

/// The error of a vocabulary edited by `edit`.
fn refused(edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> ModelError {
    match Tokenizer::from_gguf(&small_file(edit)) {
        Ok(_) => panic!("a hostile vocabulary was accepted"),
        Err(e) => e,
    }
}

fn set(m: &mut [(&'static str, Value)], key: &str, v: Value) {
    m.iter_mut().find(|(k, _)| *k == key).unwrap().1 = v;
}

fn shorten(m: &mut [(&'static str, Value)], key: &str) {
    if let Some((_, Value::Array(_, items))) = m.iter_mut().find(|(k, _)| *k == key) {
        items.pop();
    }
}

fn assert_bad(e: ModelError, key: &str, says: &str) {
    match &e {
        ModelError::BadMetadata { key: k, .. } => assert!(k.contains(key), "{e}"),
        other => panic!("expected BadMetadata on {key}, got {other}"),
    }
    assert!(e.to_string().contains(says), "{e}");
}

#[test]
fn scores_missing_or_of_another_length_are_refused() {
    let e = refused(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.scores"));
    assert_bad(e, "tokenizer.ggml.scores", "absent");
    let e = refused(|m| shorten(m, "tokenizer.ggml.scores"));
    let n = small_pieces().len();
    assert_bad(e, "tokenizer.ggml.scores", &format!("{} elements", n - 1));
    let e = refused(|m| {
        if let Some((_, Value::Array(_, s))) =
            m.iter_mut().find(|(k, _)| *k == "tokenizer.ggml.scores")
        {
            s[300] = Value::F32(f32::NAN);
        }
    });
    assert_bad(e, "tokenizer.ggml.scores", "element 300");
}

#[test]
fn token_types_missing_of_another_length_or_unknown_are_refused() {
    let e = refused(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.token_type"));
    assert_bad(e, "tokenizer.ggml.token_type", "absent");
    let e = refused(|m| shorten(m, "tokenizer.ggml.token_type"));
    assert_bad(e, "tokenizer.ggml.token_type", "elements");
    let e = refused(|m| {
        if let Some((_, Value::Array(_, t))) = m
            .iter_mut()
            .find(|(k, _)| *k == "tokenizer.ggml.token_type")
        {
            t[7] = Value::I32(9);
        }
    });
    assert_bad(e, "tokenizer.ggml.token_type", "element 7 = 9");
}

#[test]
fn a_missing_byte_token_is_named() {
    let at = id_of("<0x41>") as usize;
    let e = refused(|m| {
        if let Some((_, Value::Array(_, t))) =
            m.iter_mut().find(|(k, _)| *k == "tokenizer.ggml.tokens")
        {
            t[at] = Value::String("zz".into());
        }
        if let Some((_, Value::Array(_, t))) = m
            .iter_mut()
            .find(|(k, _)| *k == "tokenizer.ggml.token_type")
        {
            t[at] = Value::I32(N);
        }
    });
    assert_bad(e, "tokenizer.ggml.tokens", "<0x41> is missing");
    // present, but not typed as a byte
    let e = refused(|m| {
        if let Some((_, Value::Array(_, t))) = m
            .iter_mut()
            .find(|(k, _)| *k == "tokenizer.ggml.token_type")
        {
            t[at] = Value::I32(N);
        }
    });
    assert_bad(
        e,
        "tokenizer.ggml.tokens",
        &format!("token {at} = <0x41> of type Normal"),
    );
    // typed as a byte, but not <0xXX>
    let e = refused(|m| {
        if let Some((_, Value::Array(_, t))) = m
            .iter_mut()
            .find(|(k, _)| *k == "tokenizer.ggml.token_type")
        {
            t[id_of("a") as usize] = Value::I32(B);
        }
    });
    assert_bad(e, "tokenizer.ggml.token_type", "<0xXX>");
}

#[test]
fn special_ids_past_the_vocabulary_are_refused() {
    let n = small_pieces().len() as u32;
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
    ] {
        let e = refused(|m| set(m, key, Value::U32(n)));
        assert_bad(e, key, "past the vocabulary");
    }
    let e = refused(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.bos_token_id"));
    assert_bad(e, "tokenizer.ggml.add_bos_token", "names none");
}

#[test]
fn duplicate_pieces_and_a_dummy_prefix_are_refused() {
    let e = refused(|m| {
        if let Some((_, Value::Array(_, t))) =
            m.iter_mut().find(|(k, _)| *k == "tokenizer.ggml.tokens")
        {
            t[id_of("he") as usize] = Value::String("▁t".into());
        }
    });
    assert_bad(e, "tokenizer.ggml.tokens", "the same piece as token");
    let e = refused(|m| set(m, "tokenizer.ggml.add_space_prefix", Value::Bool(true)));
    assert_bad(e, "tokenizer.ggml.add_space_prefix", "dummy space prefix");
    let e = refused(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.add_space_prefix"));
    assert_bad(e, "tokenizer.ggml.add_space_prefix", "absent");
}

/// Text without U+2581: SentencePiece reads it as an escaped space, so it decodes to a space
/// (the original tokenizer does the same).
fn text() -> impl Strategy<Value = String> {
    any::<String>().prop_map(|s| s.replace('\u{2581}', ""))
}

proptest! {
    #[test]
    fn decode_inverts_encode_on_gemma(s in text()) {
        let tok = gemma();
        prop_assert_eq!(tok.decode(&tok.encode(&s).unwrap()), s.clone());
        prop_assert_eq!(tok.decode(&tok.encode_continuation(&s).unwrap()), s);
    }

    #[test]
    fn decode_inverts_encode_on_the_small_vocabulary(
        parts in prop::collection::vec(
            prop_oneof![
                text(),
                Just(" ".to_string()),
                Just("  ".to_string()),
                Just("\n".to_string()),
                Just("<b>".to_string()),
                Just("<start_of_turn>".to_string()),
                Just("the thing".to_string()),
            ],
            0..8,
        )
    ) {
        let tok = small();
        let s = parts.concat();
        prop_assert_eq!(tok.decode(&tok.encode(&s).unwrap()), s);
    }
}
