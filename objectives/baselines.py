"""Slow reference implementations of spanning-tree expectations, for tests and benchmarks.

Nothing here imports `objectives.mtt` or `objectives.expectations` (only the project's
arc mask, `objectives.conventions.arc_mask`): the brute-force oracles enumerate every
tree, and the matrix-tree baselines build their own Laplacian, so they check the fast
engine independently.

Conventions follow docs/architecture.md: `scores` is `(B, N+1, N+1)` (or labeled
`(B, N+1, N+1, L)`), `scores[b, h, m]` the log-weight of the arc h -> m, position 0 the
root, `lengths` `(B,)` words per sentence. Per-arc values `r` carry one trailing axis
more than `scores`: `(B, N+1, N+1, R)` (labeled `(B, N+1, N+1, L, R)`). `multiroot=False`
is the single-root tree set (Koo et al., 2007), `True` Tutte's multi-root set.
Every function computes in float64 and returns float64.

Contents:
- brute force over all trees (N <= 7): `enumerate_trees`, `brute_*`;
- Smith & Eisner (2007) entropy, O(N^4): `smith_eisner_entropy(_batched)`;
- Druck & Smith (2009) covariance and two-arc marginals, O(N^4);
- per-dimension reverse mode (Zmigrod et al., 2021, Alg. 2): `reverse_mode_second_order`.
"""

import functools
import itertools

import torch

from .conventions import arc_mask

MAX_BRUTE_LENGTH = 7


# --------------------------------------------------------------------------- helpers


def random_batch(
    lengths,
    num_labels: int | None = None,
    scale: float = 1.0,
    pad_value: float = 1e4,
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator | None = None,
):
    """A random padded batch: scores N(0, scale^2) on arcs, `pad_value` everywhere else.

    lengths: sequence of B ints -> (scores `(B, N+1, N+1)` or `(B, N+1, N+1, L)` with
    `num_labels=L`, N = max(lengths); lengths `(B,)` long). The large garbage on
    non-arcs and padding makes any leak of those entries into a result visible.
    """
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    size = int(lengths.max()) + 1
    shape = (len(lengths), size, size) + ((num_labels,) if num_labels else ())
    scores = scale * torch.randn(shape, generator=generator, dtype=torch.float64)
    mask = arc_mask(lengths, size - 1)
    if num_labels:
        mask = mask[..., None]
    return torch.where(mask, scores, pad_value).to(dtype), lengths


def _labeled(scores: torch.Tensor) -> bool:
    if scores.dim() not in (3, 4):
        raise ValueError(f"scores must be (B, N+1, N+1[, L]), got {tuple(scores.shape)}")
    return scores.dim() == 4


def _shifted_weights(scores: torch.Tensor, lengths: torch.Tensor):
    """exp(scores - c_m) in float64, exactly 0 on non-arcs and padding.

    scores `(B, N+1, N+1[, L])` -> (weights of the same shape, c `(B, N+1)`), c_m the
    largest score of an arc into word m (0 where there is none). Shifting column m of
    the Laplacian divides the determinant by exp(c_m) and leaves every ratio unchanged.
    """
    mask = arc_mask(lengths, scores.shape[1] - 1)
    if _labeled(scores):
        mask = mask[..., None]
    masked = torch.where(mask, scores.double(), -torch.inf)
    c = masked.amax(1).detach()
    if c.dim() == 3:
        c = c.amax(-1)
    c = torch.where(torch.isfinite(c), c, 0.0)
    view = c.shape[:1] + (1,) + c.shape[1:] + (1,) * (scores.dim() - 3)
    return torch.exp(masked - c.view(view)), c


def _arc_weights(w: torch.Tensor) -> torch.Tensor:
    """Sum out the label axis: `(B, N+1, N+1[, L])` -> `(B, N+1, N+1)`."""
    return w.sum(-1) if w.dim() == 4 else w


def _laplacian(w: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """Laplacian of arc weights, identity on padding.

    w `(B, N+1, N+1)` (zero on non-arcs) -> `(B, N, N)`, row/column i for word i+1.
    Multi-root: Tutte's Laplacian, diagonal = all weight into the word (root included).
    Single-root: Koo et al. (2007), diagonal without root weight and the first row
    replaced by the root weights.
    """
    size = w.shape[-1] - 1
    into = w[:, 1:, 1:].sum(1) + (w[:, 0, 1:] if multiroot else 0.0)
    pad = torch.arange(1, size + 1, device=w.device)[None, :] > lengths[:, None]
    lap = torch.diag_embed(into + pad.to(w.dtype)) - w[:, 1:, 1:]
    if not multiroot:
        lap = torch.cat([w[:, :1, 1:], lap[:, 1:]], dim=1)
    return lap


def _mtt_log_partition(scores, lengths, multiroot):
    """Differentiable log Z by the matrix-tree theorem: `(B, N+1, N+1[, L])` -> `(B,)`."""
    w, c = _shifted_weights(scores, lengths)
    return torch.linalg.slogdet(_laplacian(_arc_weights(w), lengths, multiroot))[1] + c.sum(1)


def _masked_values(r: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-arc values `(B, N+1, N+1[, L], R)` in float64, zeroed off the arcs."""
    mask = arc_mask(lengths, r.shape[1] - 1)
    mask = mask.view(mask.shape + (1,) * (r.dim() - 3))
    return torch.where(mask, r.double(), 0.0)


# --------------------------------------------------------------------------- brute force


@functools.cache
def _trees(n: int, multiroot: bool) -> torch.Tensor:
    choices = [[h for h in range(n + 1) if h != m] for m in range(1, n + 1)]
    heads = torch.tensor(list(itertools.product(*choices)), dtype=torch.long)
    heads = torch.cat([torch.zeros(len(heads), 1, dtype=torch.long), heads], dim=1)
    node = torch.arange(n + 1).expand_as(heads)
    for _ in range(n):  # n hops from any word reach the root iff there is no cycle
        node = heads.gather(1, node)
    keep = (node == 0).all(1)
    if not multiroot:
        keep &= (heads[:, 1:] == 0).sum(1) == 1
    return heads[keep]


def enumerate_trees(n: int, multiroot: bool = False) -> torch.Tensor:
    """Every dependency tree over n words: LongTensor `(T, n+1)` of heads, column 0 = 0.

    T = (n+1)^(n-1) multi-root trees, n^(n-1) single-root trees.
    """
    if not 1 <= n <= MAX_BRUTE_LENGTH:
        raise ValueError(f"n must be in 1..{MAX_BRUTE_LENGTH}, got {n}")
    return _trees(n, multiroot).clone()


@functools.cache
def _structures(n: int, multiroot: bool, num_labels: int | None):
    """Trees x label assignments as index tuples into an `(n+1, n+1[, L])` block.

    Returns (heads `(T, n+1)`, labels `(T, n+1)` or None, index) where `block[index]`
    is `(T, n, ...)`: the entry of each word's arc in each structure.
    """
    heads = _trees(n, multiroot)
    words = torch.arange(1, n + 1)
    if num_labels is None:
        return heads, None, (heads[:, 1:], words)
    assignments = torch.tensor(list(itertools.product(range(num_labels), repeat=n)))
    assignments = assignments.view(-1, n)
    heads = heads.repeat_interleave(len(assignments), 0)
    labels = assignments.repeat(len(heads) // len(assignments), 1)
    labels = torch.cat([torch.zeros(len(labels), 1, dtype=torch.long), labels], dim=1)
    return heads, labels, (heads[:, 1:], words, labels[:, 1:])


def _sentences(scores: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """Yield (b, n, index, log p `(T,)`, log Z) for each sentence by enumeration."""
    num_labels = scores.shape[-1] if _labeled(scores) else None
    for b, n in enumerate(lengths.tolist()):
        if not 1 <= n <= min(MAX_BRUTE_LENGTH, scores.shape[1] - 1):
            raise ValueError(f"lengths must be in 1..min(N, {MAX_BRUTE_LENGTH}), got {n}")
        _, _, index = _structures(n, multiroot, num_labels)
        log_w = scores[b, : n + 1, : n + 1].double()[index].sum(1)
        log_z = torch.logsumexp(log_w, 0)
        yield b, n, index, log_w - log_z, log_z


def _values(r: torch.Tensor, b: int, n: int, index) -> torch.Tensor:
    """r(d) = sum over arcs of d of r_e, for every structure: -> `(T, R)`."""
    return r[b, : n + 1, : n + 1].double()[index].sum(1)


def _log_probs(scores, lengths, multiroot):
    return [lp for *_, lp, _ in _sentences(scores, lengths, multiroot)]


def _weighted(log_p: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """sum_d p(d) values(d), skipping trees of probability 0 (whose log-values may be -inf)."""
    return torch.where(log_p > -torch.inf, log_p.exp() * values, 0.0).sum()


def brute_log_partition(scores, lengths, multiroot=False) -> torch.Tensor:
    """log sum_d exp(score(d)) by enumeration: -> `(B,)`."""
    return torch.stack([lz for *_, lz in _sentences(scores, lengths, multiroot)])


def brute_marginals(scores, lengths, multiroot=False) -> torch.Tensor:
    """P(e in d) for every (labeled) arc: -> shape of scores, 0 on non-arcs/padding."""
    mu = torch.zeros(scores.shape, dtype=torch.float64)
    for b, n, index, log_p, _ in _sentences(scores, lengths, multiroot):
        block = torch.zeros(mu[b, : n + 1, : n + 1].shape, dtype=torch.float64)
        block.index_put_(index, log_p.exp()[:, None].expand(-1, n), accumulate=True)
        mu[b, : n + 1, : n + 1] = block
    return mu


def brute_expectation(scores, lengths, r, multiroot=False) -> torch.Tensor:
    """E[r(d)], r(d) = sum_{e in d} r_e: r `(*scores.shape, R)` -> `(B, R)`."""
    return torch.stack(
        [log_p.exp() @ _values(r, b, n, idx) for b, n, idx, log_p, _ in _sentences(scores, lengths, multiroot)]
    )


def brute_second_order(scores, lengths, r, s, multiroot=False) -> torch.Tensor:
    """E[r(d) s(d)^T]: r `(*scores.shape, R)`, s `(*scores.shape, S)` -> `(B, R, S)`."""
    out = []
    for b, n, idx, log_p, _ in _sentences(scores, lengths, multiroot):
        out.append(_values(r, b, n, idx).T @ (log_p.exp()[:, None] * _values(s, b, n, idx)))
    return torch.stack(out)


def brute_covariance(scores, lengths, r, s, multiroot=False) -> torch.Tensor:
    """Cov(r(d), s(d)) by enumeration: -> `(B, R, S)`."""
    e_r = brute_expectation(scores, lengths, r, multiroot)
    e_s = brute_expectation(scores, lengths, s, multiroot)
    return brute_second_order(scores, lengths, r, s, multiroot) - e_r[:, :, None] * e_s[:, None, :]


def brute_entropy(scores, lengths, multiroot=False) -> torch.Tensor:
    """Shannon entropy -sum_d p(d) log p(d) in nats: -> `(B,)`."""
    return torch.stack([-_weighted(lp, lp) for lp in _log_probs(scores, lengths, multiroot)])


def brute_cross_entropy(p_scores, q_scores, lengths, multiroot=False) -> torch.Tensor:
    """-sum_d p(d) log q(d): -> `(B,)`."""
    pairs = zip(_log_probs(p_scores, lengths, multiroot), _log_probs(q_scores, lengths, multiroot))
    return torch.stack([-_weighted(lp, lq) for lp, lq in pairs])


def brute_kl_divergence(p_scores, q_scores, lengths, multiroot=False) -> torch.Tensor:
    """KL(p || q) = sum_d p(d) (log p(d) - log q(d)): -> `(B,)`."""
    pairs = zip(_log_probs(p_scores, lengths, multiroot), _log_probs(q_scores, lengths, multiroot))
    return torch.stack([_weighted(lp, lp - lq) for lp, lq in pairs])


def brute_renyi_entropy(scores, lengths, alpha: float, multiroot=False) -> torch.Tensor:
    """Renyi entropy log(sum_d p(d)^alpha) / (1 - alpha), Shannon at alpha = 1: -> `(B,)`."""
    if alpha == 1:
        return brute_entropy(scores, lengths, multiroot)
    return torch.stack([torch.logsumexp(alpha * lp, 0) / (1 - alpha) for lp in _log_probs(scores, lengths, multiroot)])


def brute_log_prob(scores, lengths, heads, labels=None, multiroot=False) -> torch.Tensor:
    """log p(d) of the given trees, -inf if d is not in the tree set: -> `(B,)`.

    heads `(B, N+1)` long (labels `(B, N+1)` long for labeled scores); only words
    1..n of each sentence are read.
    """
    out = []
    for b, n, _, log_p, _ in _sentences(scores, lengths, multiroot):
        all_heads, all_labels, _ = _structures(n, multiroot, scores.shape[-1] if _labeled(scores) else None)
        match = (all_heads[:, 1:] == heads[b, 1 : n + 1].cpu()).all(1)
        if all_labels is not None:
            match &= (all_labels[:, 1:] == labels[b, 1 : n + 1].cpu()).all(1)
        out.append(log_p[match][0] if match.any() else torch.tensor(-torch.inf, dtype=torch.float64))
    return torch.stack(out)


# --------------------------------------------------------------------------- Smith & Eisner


def _entropy_terms(scores, lengths):
    """Shifted arc weights w_hm and w_hm (s_hm - c_m): 2 x `(B, N+1, N+1)`.

    With the column shifts c_m of `_shifted_weights`, the column-replaced determinant
    ratios are E[s_{d(m), m}] - c_m, small numbers, and log Z - sum_m c_m = log det L(w):
    H = log det L(w) - sum_m (E[s_{d(m), m}] - c_m) has no cancellation between large
    terms. Labeled: w_hm = sum_l w_hml and the second array is sum_l w_hml (s_hml - c_m).
    """
    w, c = _shifted_weights(scores, lengths)
    centered = scores.double() - c.view(c.shape[:1] + (1,) + c.shape[1:] + (1,) * (scores.dim() - 3))
    return _arc_weights(w), _arc_weights(w * torch.where(w > 0, centered, 0.0))


def smith_eisner_entropy(scores, lengths, multiroot=False) -> torch.Tensor:
    """Entropy by Smith & Eisner (2007): N + 1 matrix-tree calls per sentence, O(N^4).

    Column m of the Laplacian holds only the weights of the arcs into word m, and a
    determinant is linear in each column; every tree has exactly one arc into m. So
    replacing those weights w_hm by w_hm log w_hm gives Z_m = sum_d w(d) log w_{d(m), m}
    ("multiplying the incoming arcs of one node by a log factor"), and
    H = log Z - sum_m Z_m / Z. One determinant per word, sentence by sentence
    (columns shifted as in `_entropy_terms`). -> `(B,)` nats.
    """
    out = []
    for b, n in enumerate(lengths.tolist()):
        one = lengths[b : b + 1]
        w, ws = _entropy_terms(scores[b : b + 1, : n + 1, : n + 1], one)
        log_z = torch.linalg.slogdet(_laplacian(w, one, multiroot))[1]
        expected_log_w = 0.0
        for m in range(1, n + 1):
            x = w.clone()
            x[:, :, m] = ws[:, :, m]
            sign, log_zm = torch.linalg.slogdet(_laplacian(x, one, multiroot))
            expected_log_w = expected_log_w + sign * torch.exp(log_zm - log_z)
        out.append(log_z - expected_log_w)
    return torch.cat(out)


def smith_eisner_entropy_batched(scores, lengths, multiroot=False) -> torch.Tensor:
    """`smith_eisner_entropy` with the N column-replaced determinants of every sentence in
    one batched slogdet call of shape `(B, N, N, N)`: same O(N^4) work, no Python loop.
    -> `(B,)` nats.
    """
    w, ws = _entropy_terms(scores, lengths)
    batch, size = w.shape[0], w.shape[1] - 1
    replace = torch.eye(size + 1, dtype=torch.bool, device=w.device)[1:]  # (N, N+1): copy m selects column m
    x = torch.where(replace[None, :, None, :], ws[:, None], w[:, None])
    lap = _laplacian(x.flatten(0, 1), lengths.repeat_interleave(size), multiroot)
    sign, log_zm = torch.linalg.slogdet(lap.view(batch, size, size, size))
    log_z = torch.linalg.slogdet(_laplacian(w, lengths, multiroot))[1]
    ratio = sign * torch.exp(log_zm - log_z[:, None])
    real = torch.arange(1, size + 1, device=w.device)[None, :] <= lengths[:, None]
    return log_z - torch.where(real, ratio, 0.0).sum(1)


# --------------------------------------------------------------------------- Druck & Smith


def _inverse_view(scores, lengths, multiroot):
    """Shifted weights and the entries of L^{-1} that Druck & Smith's formulas read.

    The Laplacian is linear, L = sum_e w_e a_e u_m^T for arc e = h -> m (u_m the unit
    vector of word m), with a_e = u_m - u_h (u_0 = 0) in the multi-root case; in the
    single-root case the first coordinate (the replaced row) is dropped and a_{0->m} = u_1.
    Returns w `(B, N+1, N+1[, L])` and X `(B, N+1, N+1, N+1)` with
    X[b, m, h', m'] = u_m^T L^{-1} a_{h'->m'} (zero for m = 0); for the multi-root case
    this is D&S's K^{-1}_{m,m'} - K^{-1}_{m,h'}. The marginal of h -> m is w_hm X[m, h, m].
    """
    w, _ = _shifted_weights(scores, lengths)
    inv = torch.linalg.inv(_laplacian(_arc_weights(w), lengths, multiroot))
    col = torch.nn.functional.pad(inv, (1, 0))  # (B, N, N+1): L^{-1} u_h, 0 for the root
    if not multiroot:
        first = col[..., 1].clone()
        col[..., 1] = 0.0
    x = col[..., None, :] - col[..., :, None]  # x[b, i, h, m] = (L^{-1} a_{h->m})_i
    if not multiroot:
        x[:, :, 0, :] = first[..., None]
    return w, torch.nn.functional.pad(x, (0, 0, 0, 0, 1, 0))


def _first_order(x):
    """X[b, m, h, m] -> `(B, N+1, N+1)` indexed [b, h, m]."""
    return torch.diagonal(x, dim1=1, dim2=3)


def _pair_term(x):
    """X[e, e'] X[e', e] for all arc pairs: -> `(B, N+1, N+1, N+1, N+1)` [b, h, m, h', m']."""
    return torch.einsum("bmxy,byhm->bhmxy", x, x)


def druck_smith_two_arc_marginals(scores, lengths, multiroot=False) -> torch.Tensor:
    """P(e in d and e' in d) for all pairs of arcs by Druck & Smith (2009), eq. 3.

    p(e, e') = w_e w_e' (X[e, e] X[e', e'] - X[e, e'] X[e', e]) for e != e' (eq. 3 as
    printed omits the factor w_e w_e'), and p(e, e) = P(e in d). Unlabeled scores
    `(B, N+1, N+1)` -> `(B, N+1, N+1, N+1, N+1)` indexed [b, h, m, h', m'].
    """
    if _labeled(scores):
        raise ValueError("scores must be unlabeled (B, N+1, N+1) for two-arc marginals")
    w, x = _inverse_view(scores, lengths, multiroot)
    d = _first_order(x)
    pairs = w[:, :, :, None, None] * w[:, None, None] * (d[:, :, :, None, None] * d[:, None, None] - _pair_term(x))
    size = w.shape[1]
    same = torch.eye(size * size, dtype=torch.bool, device=w.device).view(size, size, size, size)
    return torch.where(same, (w * d)[:, :, :, None, None], pairs)


def druck_smith_covariance(scores, lengths, r, s, multiroot=False) -> torch.Tensor:
    """Cov(r(d), s(d)) by Druck & Smith (2009), eq. 2: the Hessian of log Z from L^{-1}.

    Cov_kl = sum_e mu_e r_ek s_el - sum_{e, e'} w_e r_ek w_e' s_e'l X[e, e'] X[e', e],
    materialising all O(N^4) pairs of arcs. Labeled arcs share their arc's column of
    the Laplacian, so their weights enter through sum_l w_hml r_hml.
    r `(*scores.shape, R)`, s `(*scores.shape, S)` -> `(B, R, S)`.
    """
    labeled = _labeled(scores)
    w, x = _inverse_view(scores, lengths, multiroot)
    r, s = _masked_values(r, lengths), _masked_values(s, lengths)
    d = _first_order(x)
    mu = w * (d[..., None] if labeled else d)
    diagonal = ((mu[..., None] * r)[..., None] * s[..., None, :]).flatten(1, -3).sum(1)
    wr, ws = w[..., None] * r, w[..., None] * s
    if labeled:
        wr, ws = wr.sum(3), ws.sum(3)
    return diagonal - torch.einsum("bhmk,bhmxy,bxyl->bkl", wr, _pair_term(x), ws)


# --------------------------------------------------------------------------- reverse mode


def reverse_mode_second_order(scores, lengths, r, s, multiroot=False) -> torch.Tensor:
    """E[r(d) s(d)^T] by one reverse-mode pass per dimension of r (Zmigrod et al. 2021, Alg. 2).

    For each k: E[r_k] = d/dt log Z(scores + t r_k) at t = 0 (a gradient of our own
    matrix-tree log Z), then one backward pass gives d E[r_k] / d scores_e =
    Cov(r_k, 1_e), and E[r_k s_l] = sum_e Cov(r_k, 1_e) s_el + E[r_k] E[s_l]. O(R N^3).
    r `(*scores.shape, R)`, s `(*scores.shape, S)` -> `(B, R, S)`.
    """
    scores = scores.detach().double().requires_grad_()
    r, s = _masked_values(r, lengths), _masked_values(s, lengths)
    mu = torch.autograd.grad(_mtt_log_partition(scores, lengths, multiroot).sum(), scores)[0]
    e_s = (mu[..., None] * s).flatten(1, -2).sum(1)
    view = (-1,) + (1,) * (scores.dim() - 1)
    rows = []
    for k in range(r.shape[-1]):
        t = torch.zeros(len(scores), dtype=torch.float64, requires_grad=True)
        log_z = _mtt_log_partition(scores + t.view(view) * r[..., k], lengths, multiroot)
        e_rk = torch.autograd.grad(log_z.sum(), t, create_graph=True)[0]
        cov_rk_arcs = torch.autograd.grad(e_rk.sum(), scores)[0]
        rows.append((cov_rk_arcs[..., None] * s).flatten(1, -2).sum(1) + e_rk.detach()[:, None] * e_s)
    return torch.stack(rows, 1)
