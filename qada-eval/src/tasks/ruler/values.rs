//! The keys and values RULER's tasks hide, drawn from a seeded generator: adjective-noun keys
//! and word pairs, 7-digit numbers, UUIDs, 5-letter variable names and coded words.

use rand::seq::SliceRandom;
use rand::Rng;

const ADJECTIVES: &[&str] = &[
    "amber", "ancient", "bitter", "bold", "brave", "bright", "calm", "clever", "crimson",
    "curious", "damp", "distant", "dusty", "eager", "early", "faint", "fierce", "fragile",
    "gentle", "gloomy", "golden", "hollow", "humble", "icy", "jolly", "lively", "lonely", "loud",
    "mellow", "misty", "narrow", "noble", "pale", "patient", "proud", "quiet", "rapid", "restless",
    "rusty", "sandy", "shiny", "silent", "silver", "sleepy", "smooth", "steady", "swift", "tidy",
    "vivid", "wary", "windy", "wooden",
];

const NOUNS: &[&str] = &[
    "anchor", "badger", "basket", "beacon", "bicycle", "blanket", "canyon", "castle", "cellar",
    "comet", "compass", "cottage", "falcon", "feather", "garden", "glacier", "harbor", "helmet",
    "island", "kettle", "ladder", "lantern", "meadow", "mirror", "orchard", "otter", "painter",
    "pebble", "pepper", "pillow", "pirate", "pocket", "puzzle", "rabbit", "ribbon", "saddle",
    "sparrow", "spider", "teapot", "thimble", "tiger", "tractor", "trumpet", "tunnel", "violin",
    "wagon", "walnut", "whistle", "willow", "window",
];

/// What a needle's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ValueKind {
    /// A 7-digit number.
    Number,
    /// An adjective-noun pair such as `quiet-harbor`.
    Words,
    /// A random UUID, `8-4-4-4-12` hex digits.
    Uuid,
}

impl ValueKind {
    /// The kind's plural as the prompt names it (RULER's `type_needle_v`).
    pub(super) fn plural(self) -> &'static str {
        match self {
            ValueKind::Number => "numbers",
            ValueKind::Words => "words",
            ValueKind::Uuid => "uuids",
        }
    }

    /// One value of this kind.
    pub(super) fn draw(self, rng: &mut impl Rng) -> String {
        match self {
            ValueKind::Number => rng.gen_range(1_000_000..10_000_000u32).to_string(),
            ValueKind::Words => word_pair(rng),
            ValueKind::Uuid => uuid(rng),
        }
    }
}

/// An adjective-noun pair joined by a hyphen (keys and word values).
pub(super) fn word_pair(rng: &mut impl Rng) -> String {
    let a = ADJECTIVES
        .choose(rng)
        .expect("the adjective list is not empty");
    let n = NOUNS.choose(rng).expect("the noun list is not empty");
    format!("{a}-{n}")
}

/// A version-4 UUID in lower-case hex, `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx` with `y` in
/// `8..=b`, from 122 random bits of `rng`.
pub(super) fn uuid(rng: &mut impl Rng) -> String {
    let bits: u128 = rng.gen();
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let h = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A variable name of the variable-tracking task: 5 upper-case letters.
pub(super) fn var_name(rng: &mut impl Rng) -> String {
    letters(rng, 5, b'A')
}

/// A coded word of the frequent-words task: `len` lower-case letters.
pub(super) fn coded_word(rng: &mut impl Rng, len: usize) -> String {
    letters(rng, len, b'a')
}

fn letters(rng: &mut impl Rng, len: usize, first: u8) -> String {
    (0..len)
        .map(|_| char::from(first + rng.gen_range(0..26u8)))
        .collect()
}

/// `n` distinct strings from `draw`, in the order drawn, none of them in `taken` (which gets
/// them all). `draw` must be able to produce more than `n + taken.len()` strings.
pub(super) fn distinct<R: Rng>(
    rng: &mut R,
    n: usize,
    taken: &mut Vec<String>,
    mut draw: impl FnMut(&mut R) -> String,
) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let s = draw(rng);
        if !taken.contains(&s) {
            taken.push(s.clone());
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn uuids_have_the_8_4_4_4_12_version_4_format_and_vary() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = Vec::new();
        for _ in 0..200 {
            let u = uuid(&mut rng);
            let groups: Vec<&str> = u.split('-').collect();
            let sizes: Vec<usize> = groups.iter().map(|g| g.len()).collect();
            assert_eq!(sizes, [8, 4, 4, 4, 12], "{u}");
            assert!(u
                .chars()
                .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
            assert!(groups[2].starts_with('4'), "{u}");
            assert!("89ab".contains(&groups[3][..1]), "{u}");
            seen.push(u);
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 200);
    }

    #[test]
    fn values_have_their_kind_s_shape() {
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let n = ValueKind::Number.draw(&mut rng);
            assert!(n.len() == 7 && n.bytes().all(|b| b.is_ascii_digit()), "{n}");
            let w = ValueKind::Words.draw(&mut rng);
            let (a, b) = w.split_once('-').unwrap();
            assert!(ADJECTIVES.contains(&a) && NOUNS.contains(&b), "{w}");
            let v = var_name(&mut rng);
            assert!(
                v.len() == 5 && v.bytes().all(|b| b.is_ascii_uppercase()),
                "{v}"
            );
        }
    }

    #[test]
    fn distinct_never_repeats_nor_reuses_what_is_taken() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut taken = vec!["A".to_string()];
        let names = distinct(&mut rng, 20, &mut taken, |r| letters(r, 1, b'A'));
        assert!(!names.contains(&"A".to_string()));
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 20);
        assert_eq!(taken.len(), 21);
    }
}
