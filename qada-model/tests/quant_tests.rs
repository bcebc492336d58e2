//! Dequantization of every supported type on blocks built by the test from chosen quants,
//! scales and minimums, so that every expected value is known by construction.

use half::{bf16, f16};
use qada_model::quant::{dequantize, GgmlType};

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn run(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n];
    assert!(dequantize(ty, bytes, &mut out), "{ty} refused");
    out
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "value {i}: {g} vs {w}"
        );
    }
}

#[test]
fn f32_f16_bf16() {
    let vals = [0.0f32, 1.5, -2.25, 65504.0, 1e-3];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_close(&run(GgmlType::F32, &bytes, 5), &vals);
    let bytes: Vec<u8> = vals.iter().flat_map(|&v| h(v)).collect();
    let want: Vec<f32> = vals.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_close(&run(GgmlType::F16, &bytes, 5), &want);
    let bytes: Vec<u8> = vals
        .iter()
        .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
        .collect();
    let want: Vec<f32> = vals.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    assert_close(&run(GgmlType::BF16, &bytes, 5), &want);
}

/// 32 quants 0..15 as Q4 nibbles: value j in the low nibble of byte j, value j + 16 in the high.
fn nibbles(q: &[u8; 32]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for j in 0..16 {
        out[j] = (q[j] & 0x0f) | (q[j + 16] << 4);
    }
    out
}

#[test]
fn q4_0_and_q4_1() {
    let q: [u8; 32] = std::array::from_fn(|i| ((i * 7) % 16) as u8);
    let (d, m) = (0.25f32, -1.5f32);
    let mut b = h(d).to_vec();
    b.extend_from_slice(&nibbles(&q));
    let want: Vec<f32> = q.iter().map(|&x| (x as f32 - 8.0) * d).collect();
    assert_close(&run(GgmlType::Q4_0, &b, 32), &want);
    let mut b = h(d).to_vec();
    b.extend_from_slice(&h(m));
    b.extend_from_slice(&nibbles(&q));
    let want: Vec<f32> = q.iter().map(|&x| x as f32 * d + m).collect();
    assert_close(&run(GgmlType::Q4_1, &b, 32), &want);
}

#[test]
fn q5_0_and_q5_1() {
    let q: [u8; 32] = std::array::from_fn(|i| ((i * 11 + 3) % 32) as u8);
    let mut qh = 0u32;
    for (j, &x) in q.iter().enumerate() {
        qh |= ((x >> 4) as u32 & 1) << j;
    }
    let low: [u8; 32] = std::array::from_fn(|i| q[i] & 0x0f);
    let (d, m) = (0.5f32, 2.0f32);
    let mut b = h(d).to_vec();
    b.extend_from_slice(&qh.to_le_bytes());
    b.extend_from_slice(&nibbles(&low));
    let want: Vec<f32> = q.iter().map(|&x| (x as f32 - 16.0) * d).collect();
    assert_close(&run(GgmlType::Q5_0, &b, 32), &want);
    let mut b = h(d).to_vec();
    b.extend_from_slice(&h(m));
    b.extend_from_slice(&qh.to_le_bytes());
    b.extend_from_slice(&nibbles(&low));
    let want: Vec<f32> = q.iter().map(|&x| x as f32 * d + m).collect();
    assert_close(&run(GgmlType::Q5_1, &b, 32), &want);
}

#[test]
fn q8_0() {
    let d = 0.125f32;
    let q: Vec<i8> = (0..64).map(|i| (i * 37 % 256) as u8 as i8).collect();
    let mut b = Vec::new();
    for blk in q.chunks(32) {
        b.extend_from_slice(&h(d));
        b.extend(blk.iter().map(|&x| x as u8));
    }
    let want: Vec<f32> = q.iter().map(|&x| x as f32 * d).collect();
    assert_close(&run(GgmlType::Q8_0, &b, 64), &want);
}

/// The 12 bytes that hold eight 6-bit scales and mins of a Q4_K / Q5_K block.
fn k_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4);
    }
    q
}

#[test]
fn q4_k_and_q5_k() {
    let sc: [u8; 8] = [1, 7, 13, 63, 32, 17, 48, 5];
    let mn: [u8; 8] = [0, 63, 2, 40, 9, 33, 16, 60];
    let (d, dmin) = (0.0625f32, 0.03125f32);
    // quants: 4 bits for Q4_K, 5 bits for Q5_K
    let q4: Vec<u8> = (0..256).map(|i| ((i * 5 + 1) % 16) as u8).collect();
    let q5: Vec<u8> = (0..256).map(|i| ((i * 13 + 7) % 32) as u8).collect();
    // element (group g, half s, l): index 64 g + 32 s + l, sub-block 2 g + s
    let expected = |q: &[u8]| -> Vec<f32> {
        (0..256)
            .map(|i| {
                let sub = i / 32;
                d * sc[sub] as f32 * q[i] as f32 - dmin * mn[sub] as f32
            })
            .collect()
    };
    let pack = |q: &[u8]| -> Vec<u8> {
        let mut qs = vec![0u8; 128];
        for g in 0..4 {
            for l in 0..32 {
                qs[32 * g + l] = (q[64 * g + l] & 0x0f) | ((q[64 * g + 32 + l] & 0x0f) << 4);
            }
        }
        qs
    };
    let mut b = h(d).to_vec();
    b.extend_from_slice(&h(dmin));
    b.extend_from_slice(&k_scales(&sc, &mn));
    b.extend_from_slice(&pack(&q4));
    assert_close(&run(GgmlType::Q4_K, &b, 256), &expected(&q4));

    let mut qh = vec![0u8; 32];
    for g in 0..4 {
        for l in 0..32 {
            qh[l] |= ((q5[64 * g + l] >> 4) & 1) << (2 * g);
            qh[l] |= ((q5[64 * g + 32 + l] >> 4) & 1) << (2 * g + 1);
        }
    }
    let mut b = h(d).to_vec();
    b.extend_from_slice(&h(dmin));
    b.extend_from_slice(&k_scales(&sc, &mn));
    b.extend_from_slice(&qh);
    b.extend_from_slice(&pack(&q5));
    assert_close(&run(GgmlType::Q5_K, &b, 256), &expected(&q5));
}

#[test]
fn q6_k() {
    let q: Vec<u8> = (0..256).map(|i| ((i * 29 + 5) % 64) as u8).collect();
    let sc: Vec<i8> = (0..16).map(|i| (i as i8 - 8) * 9).collect();
    let d = 0.01f32;
    let mut ql = vec![0u8; 128];
    let mut qh = vec![0u8; 64];
    for n in 0..2 {
        for l in 0..32 {
            let at = |p: usize| q[128 * n + p];
            ql[64 * n + l] = (at(l) & 0x0f) | ((at(l + 64) & 0x0f) << 4);
            ql[64 * n + l + 32] = (at(l + 32) & 0x0f) | ((at(l + 96) & 0x0f) << 4);
            qh[32 * n + l] = (at(l) >> 4)
                | ((at(l + 32) >> 4) << 2)
                | ((at(l + 64) >> 4) << 4)
                | ((at(l + 96) >> 4) << 6);
        }
    }
    let mut b = ql;
    b.extend_from_slice(&qh);
    b.extend(sc.iter().map(|&s| s as u8));
    b.extend_from_slice(&h(d));
    let dd = f16::from_f32(d).to_f32();
    let want: Vec<f32> = (0..256)
        .map(|i| {
            let (n, p) = (i / 128, i % 128);
            dd * sc[8 * n + p / 16] as f32 * (q[i] as f32 - 32.0)
        })
        .collect();
    assert_close(&run(GgmlType::Q6_K, &b, 256), &want);
}

#[test]
fn wrong_sizes_and_unsupported_types_are_refused() {
    let mut out = vec![0.0; 32];
    assert!(!dequantize(GgmlType::Q8_0, &[0u8; 33], &mut out));
    assert!(!dequantize(GgmlType::Q2_K, &[0u8; 84], &mut vec![0.0; 256]));
    assert!(!dequantize(GgmlType::Unknown(99), &[], &mut []));
    assert!(!dequantize(GgmlType::Q4_K, &[0u8; 144], &mut out));
}
