"""qada.KeyMoments against numpy's mean and population covariance."""

import numpy as np
import pytest

import qada


def keys(rng, n, d, shift=0.0):
    return (rng.standard_normal((n, d)) * 2.0 + shift).astype(np.float32)


def test_mean_and_covariance_are_numpys(rng):
    k = keys(rng, 200, 16, shift=3.0)
    m = qada.KeyMoments(16)
    m.push(k)
    assert m.count == 200 and len(m) == 200 and m.dim == 16
    k64 = k.astype(np.float64)
    np.testing.assert_allclose(m.mean, k64.mean(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(m.covariance, np.cov(k64, rowvar=False, ddof=0), rtol=0, atol=1e-9)
    assert m.mean.dtype == np.float64 and m.covariance.shape == (16, 16)
    np.testing.assert_array_equal(m.covariance, m.covariance.T)


def test_pushes_in_pieces_and_merges_equal_one_push(rng):
    k = keys(rng, 101, 8)
    whole = qada.KeyMoments(8)
    whole.push(k)
    a, b = qada.KeyMoments(8), qada.KeyMoments(8)
    a.push(k[:30])
    for row in k[30:60]:
        a.push(row)  # one key of shape (d,)
    b.push(k[60:])
    a.merge(b)
    assert a.count == 101
    np.testing.assert_allclose(a.mean, whole.mean, atol=1e-12)
    np.testing.assert_allclose(a.covariance, whole.covariance, atol=1e-10)


def test_float64_and_non_contiguous_keys_are_read_as_float32(rng):
    k = keys(rng, 50, 6)
    a = qada.KeyMoments(6)
    a.push(k)
    b = qada.KeyMoments(6)
    b.push(np.asfortranarray(k.astype(np.float64)))
    c = qada.KeyMoments(6)
    c.push(np.ascontiguousarray(k.T).T)  # a transposed view
    for m in (b, c):
        np.testing.assert_array_equal(m.mean, a.mean)
        np.testing.assert_allclose(m.covariance, a.covariance, atol=1e-12)


def test_empty_moments_are_zeros():
    m = qada.KeyMoments(4)
    assert m.count == 0
    np.testing.assert_array_equal(m.mean, np.zeros(4))
    np.testing.assert_array_equal(m.covariance, np.zeros((4, 4)))
    assert "KeyMoments(dim=4, count=0)" == repr(m)


def test_shape_errors_name_the_argument(rng):
    m = qada.KeyMoments(4)
    with pytest.raises(ValueError, match=r"keys: expected \(n, 4\).*found shape \(3, 5\)"):
        m.push(keys(rng, 3, 5))
    with pytest.raises(ValueError, match=r"keys: expected shape \(4,\), found shape \(5,\)"):
        m.push(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"keys: expected a 2-d array"):
        m.push(np.zeros((2, 2, 4), np.float32))
    with pytest.raises(ValueError, match=r"other: expected KeyMoments of dimension 4, found dimension 3"):
        m.merge(qada.KeyMoments(3))
    with pytest.raises(ValueError, match=r"dim: expected a positive key length"):
        qada.KeyMoments(0)
    assert m.count == 0
