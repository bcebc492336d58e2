"""qada.decide against numpy: the oracle's exact log-sum-exp and QAdA's Gaussian estimate.

Oracle (method.md, paper eq. 2): with scores s = scale K q,
    ln share = lse(s_I) - lse(s_I, s_bulk).
QAdA (eq. 7), with mu, Sigma the mean and population covariance of the bulk keys:
    ln A_bulk_hat = ln T_bulk + scale q.mu + scale^2 q^T Sigma q / 2,
    ln share = lse(s_I) - lse(lse(s_I), ln A_bulk_hat).
A head is local iff ln share >= ln tau.
"""

import math

import numpy as np
import pytest

import qada


def lse(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return m + math.log(np.exp(x - m).sum())


def scores(q, k, scale):
    return scale * (k.astype(np.float64) @ q.astype(np.float64))


def oracle_share(q, local, bulk, scale):
    s_local, s_bulk = scores(q, local, scale), scores(q, bulk, scale)
    return lse(s_local) - lse(np.concatenate([s_local, s_bulk]))


def gaussian_share(q, local, bulk, scale):
    b = bulk.astype(np.float64)
    mu, sigma = b.mean(axis=0), np.cov(b, rowvar=False, ddof=0)
    q64 = q.astype(np.float64)
    log_bulk = math.log(len(b)) + scale * q64 @ mu + scale**2 * (q64 @ sigma @ q64) / 2
    log_local = lse(scores(q, local, scale))
    return log_local - np.logaddexp(log_local, log_bulk)


def head(rng, d=32, n_local=24, n_bulk=300, h=None, strength=1.0):
    """Queries, local keys and bulk keys; some local keys point along the query so that the
    shares spread over (0, 1)."""
    q = rng.standard_normal((h, d) if h else d).astype(np.float32) * 2.0
    local = rng.standard_normal((n_local, d)).astype(np.float32)
    direction = q if q.ndim == 1 else q[0]
    local[:4] += strength * direction.astype(np.float32)
    bulk = (rng.standard_normal((n_bulk, d)) * 0.8 + 0.1).astype(np.float32)
    return q, local, bulk


@pytest.mark.parametrize("strength", [0.0, 0.3, 1.0])
def test_oracle_is_the_exact_log_sum_exp(rng, strength):
    q, local, bulk = head(rng, strength=strength)
    scale = 1 / math.sqrt(q.shape[-1])
    r = qada.decide(q, local, bulk, criterion="oracle", tau=0.6)
    want = oracle_share(q, local, bulk, scale)
    assert r.local.shape == () and r.log_local_share.shape == ()
    assert r.criterion == "oracle"
    assert abs(float(r.log_local_share) - want) < 1e-4 * (1 + abs(want))
    assert bool(r.local) == (want >= math.log(0.6))


@pytest.mark.parametrize("strength", [0.0, 0.3, 1.0])
def test_approx_is_the_gaussian_estimate(rng, strength):
    q, local, bulk = head(rng, strength=strength)
    scale = 1 / math.sqrt(q.shape[-1])
    want = gaussian_share(q, local, bulk, scale)
    r = qada.decide(q, local, bulk, criterion="approx", tau=0.3)
    assert abs(float(r.log_local_share) - want) < 1e-4 * (1 + abs(want))
    assert bool(r.local) == (want >= math.log(0.3))
    # the moments alone give the same estimate (T_bulk is their count)
    m = qada.KeyMoments(q.shape[-1])
    m.push(bulk)
    r2 = qada.decide(q, local, moments=m, criterion="approx", tau=0.3)
    assert float(r2.log_local_share) == pytest.approx(float(r.log_local_share), abs=1e-9)


def test_a_batch_of_heads_is_each_head_alone(rng):
    q, local, bulk = head(rng, h=6)
    for crit in ["oracle", "approx", "bound", "mixture", "hybrid", "dense", "window"]:
        batch = qada.decide(q, local, bulk, criterion=crit, tau=0.5)
        assert batch.local.shape == (6,) and batch.local.dtype == np.bool_
        assert batch.log_local_share.shape == (6,)
        for i in range(6):
            one = qada.decide(q[i], local, bulk, criterion=crit, tau=0.5)
            assert bool(one.local) == bool(batch.local[i]), crit
            np.testing.assert_equal(float(one.log_local_share), float(batch.log_local_share[i]))
    scale = 1 / math.sqrt(q.shape[1])
    shares = qada.decide(q, local, bulk, criterion="oracle").log_local_share
    want = [oracle_share(q[i], local, bulk, scale) for i in range(6)]
    np.testing.assert_allclose(shares, want, rtol=1e-4, atol=1e-5)


def test_scale_is_the_attention_scale(rng):
    q, local, bulk = head(rng)
    r = qada.decide(q, local, bulk, criterion="oracle", scale=0.05)
    assert float(r.log_local_share) == pytest.approx(oracle_share(q, local, bulk, 0.05), rel=1e-4, abs=1e-5)
    g = qada.decide(q, local, bulk, criterion="approx", scale=0.05)
    assert float(g.log_local_share) == pytest.approx(gaussian_share(q, local, bulk, 0.05), rel=1e-4, abs=1e-5)


def test_labels_follow_tau_and_the_share(rng):
    q, local, bulk = head(rng, h=16, strength=0.5)
    for crit in ["oracle", "approx", "bound", "mixture", "hybrid"]:
        for tau in [0.1, 0.5, 0.9]:
            r = qada.decide(q, local, bulk, criterion=crit, tau=tau)
            share = r.log_local_share
            np.testing.assert_array_equal(r.local, share >= math.log(tau))


def test_dense_and_window_report_no_share(rng):
    q, local, bulk = head(rng, h=3)
    d = qada.decide(q, local, bulk, criterion="dense")
    assert not d.local.any() and np.isnan(d.log_local_share).all()
    w = qada.decide(q, local, criterion="window")
    assert w.local.all() and np.isnan(w.log_local_share).all()


def test_bound_is_never_local_where_the_oracle_is_long(rng):
    q, local, bulk = head(rng, h=32, strength=0.6)
    oracle = qada.decide(q, local, bulk, criterion="oracle").log_local_share
    for page in [1, 7, 32]:
        bound = qada.decide(q, local, bulk, criterion="bound", page=page).log_local_share
        assert (bound <= oracle + 1e-6).all()
    # pages of one key bound every score by itself: the bound is the oracle, up to rounding
    tight = qada.decide(q, local, bulk, criterion="bound", page=1).log_local_share
    np.testing.assert_allclose(tight, oracle, atol=1e-3)


def test_mixture_of_one_cluster_is_qada(rng):
    q, local, bulk = head(rng, h=4)
    one = qada.decide(q, local, bulk, criterion="mixture", clusters=1).log_local_share
    approx = qada.decide(q, local, bulk, criterion="approx").log_local_share
    np.testing.assert_allclose(one, approx, rtol=1e-9, atol=1e-9)


def test_hybrid_local_calls_are_qadas(rng):
    q, local, bulk = head(rng, h=32, strength=0.6)
    for tau in [0.3, 0.6, 0.8]:
        h = qada.decide(q, local, bulk, criterion="hybrid", tau=tau, margin=0.5).local
        a = qada.decide(q, local, bulk, criterion="approx", tau=tau).local
        assert not (h & ~a).any()
    # margin 0 is QAdA
    h0 = qada.decide(q, local, bulk, criterion="hybrid", margin=0.0)
    a0 = qada.decide(q, local, bulk, criterion="approx")
    np.testing.assert_array_equal(h0.local, a0.local)


def test_no_bulk_is_local(rng):
    q, local, _ = head(rng)
    empty = np.zeros((0, q.shape[0]), np.float32)
    for crit in ["oracle", "approx", "dense", "bound", "mixture", "hybrid"]:
        assert bool(qada.decide(q, local, empty, criterion=crit).local), crit


def test_lists_and_float64_are_accepted(rng):
    q, local, bulk = head(rng, d=4, n_local=3, n_bulk=10)
    a = qada.decide(q, local, bulk, criterion="oracle")
    b = qada.decide(q.tolist(), local.astype(np.float64), bulk.T.copy().T, criterion="oracle")
    assert float(a.log_local_share) == float(b.log_local_share)


def test_argument_errors_name_the_argument(rng):
    q, local, bulk = head(rng, d=8, n_local=4, n_bulk=20)
    with pytest.raises(ValueError, match=r"local_keys: expected \(n, 8\) \(d from q\), found shape \(4, 7\)"):
        qada.decide(q, local[:, :7], bulk)
    with pytest.raises(ValueError, match=r"bulk_keys: expected \(n, 8\) \(d from q\), found shape \(20, 9\)"):
        qada.decide(q, local, np.zeros((20, 9), np.float32))
    with pytest.raises(ValueError, match=r"q: expected a query \(d,\) or a batch of heads \(h, d\), found shape \(2, 2, 8\)"):
        qada.decide(np.zeros((2, 2, 8), np.float32), local, bulk)
    with pytest.raises(ValueError, match=r"local_keys: expected a 2-d array"):
        qada.decide(q, local[0], bulk)
    with pytest.raises(ValueError, match=r"criterion: unknown criterion \"magic\": use dense, window, oracle, approx, bound, mixture, hybrid, pages, certified, quest, pages-oracle, channels, channels-ungated or channels-union"):
        qada.decide(q, local, bulk, criterion="magic")
    with pytest.raises(ValueError, match=r"criterion: unknown criterion \"static\".*static needs a table"):
        qada.decide(q, local, bulk, criterion="static")
    for tau in [0.0, 1.0000001, -0.5, 1.5, float("nan")]:
        with pytest.raises(ValueError, match=r"tau: expected a value in \(0, 1\], found"):
            qada.decide(q, local, bulk, tau=tau)
    for crit in ["oracle", "bound", "mixture", "hybrid"]:
        with pytest.raises(ValueError, match=rf"bulk_keys: expected the bulk keys \(T_bulk, d\): the {crit} criterion reads them, found None"):
            qada.decide(q, local, criterion=crit)
    with pytest.raises(ValueError, match=r"bulk_keys: expected the bulk keys \(T_bulk, d\) or moments=KeyMoments"):
        qada.decide(q, local, criterion="approx")
    with pytest.raises(ValueError, match=r"moments: expected KeyMoments of dimension 8 \(d from q\), found dimension 3"):
        qada.decide(q, local, moments=qada.KeyMoments(3))
    with pytest.raises(ValueError, match=r"page: the bound criterion's page size"):
        qada.decide(q, local, bulk, criterion="bound", page=0)
    with pytest.raises(ValueError, match=r"margin: the hybrid criterion's margin"):
        qada.decide(q, local, bulk, criterion="hybrid", margin=-1.0)


def test_certified_pages_leave_out_at_most_one_minus_tau_of_the_mass(rng):
    """The pages a head reads under `certified` hold all but at most 1 - tau of its softmax
    mass, recomputed in numpy from the scores; quest reads its budget of pages per head."""
    q, local, bulk = head(rng, h=6, strength=0.2, n_bulk=640)
    q = q * 2.5
    scale = 1 / math.sqrt(q.shape[1])
    for tau in [0.5, 0.8, 0.95]:
        d = qada.decide(q, local, bulk, criterion="certified", tau=tau, page=16)
        assert d.page_size == 16 and len(d.pages) == 6
        for j, pages in enumerate(d.pages):
            s_local, s_bulk = scores(q[j], local, scale), scores(q[j], bulk, scale)
            total = lse(np.concatenate([s_local, s_bulk]))
            kept = np.zeros(len(bulk), dtype=bool)
            for p in pages:
                kept[p * 16 : (p + 1) * 16] = True
            if kept.all():
                continue
            dropped = math.exp(lse(s_bulk[~kept]) - total)
            assert dropped <= (1 - tau) * (1 + 1e-6), (tau, j, dropped)
    quest = qada.decide(q, local, bulk, criterion="quest", page=16, quest_tokens=64)
    assert [len(p) for p in quest.pages] == [4] * 6
    # criteria that read all of the bulk or none select no pages
    assert qada.decide(q, local, bulk, criterion="approx").pages is None
    one = qada.decide(q[0], local, bulk, criterion="pages", page=16)
    assert one.pages.ndim == 1 and one.page_size == 16
    # the shipped settings' rules: pages by 16 channels, behind QAdA's gate or none; at tau 1
    # every head reads every page
    for crit in ["channels", "channels-ungated"]:
        c = qada.decide(q, local, bulk, criterion=crit, tau=0.9, page=16, channels=16)
        assert c.page_size == 16 and len(c.pages) == 6
        for j, pages in enumerate(c.pages):
            assert len(set(pages.tolist())) == len(pages) and all(0 <= p < 40 for p in pages)
            assert not c.local[j] or len(pages) == 0
        full = qada.decide(q, local, bulk, criterion=crit, tau=1.0, page=16, channels=16)
        assert [p.tolist() for p in full.pages] == [list(range(40))] * 6
    # computing over the union: the pages channels' heads chose together, for every head
    own = qada.decide(q, local, bulk, criterion="channels", tau=0.9, page=16, channels=16)
    union = qada.decide(q, local, bulk, criterion="channels-union", tau=0.9, page=16, channels=16)
    chosen = sorted(set().union(*(set(p.tolist()) for p in own.pages)))
    assert chosen, "the union chose no page: the check below would pass with none"
    for j in range(6):
        # a head that chose pages reads them all; one the gate left long reads them too
        mine = union.pages[j].tolist()
        assert mine == chosen if len(own.pages[j]) else mine in (chosen, [])
        assert union.local[j] == (len(mine) == 0)
    with pytest.raises(ValueError, match="channels"):
        qada.decide(q, local, bulk, criterion="channels", channels=0)
    with pytest.raises(ValueError, match="page"):
        qada.decide(q, local, bulk, criterion="pages", page=0)
