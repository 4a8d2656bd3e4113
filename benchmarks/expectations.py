"""Speed of the expectation engine against the algorithms it replaces, and against peers.

    python3 -m benchmarks.expectations [all|table1|ge|scaling|peers|engine] [--quick] [options]

Parts (each prints a markdown table; ``all`` runs the first four; ``--quick`` is a < 30 s
smoke test). Results and the commands that made them: ``docs/notebook/benchmarks.md``.

``table1``  Zmigrod et al. (2021), Table 1: per-sentence entropy (and entropy + gradient)
            on five UD test sets. Ours (batched, and one sentence at a time) against Smith &
            Eisner's O(N^4) entropy as the paper ran it (N + 1 matrix-tree calls per
            sentence) and vectorised (the N determinants in one batched call).
``ge``      The gradient of a GE objective with 20 UPOS-pair features on English-EWT test:
            reverse mode through T1 (ours, and plain slogdet + autograd), the T2 covariance
            route (R = 1), and Druck & Smith's route (the 20 x N^2 feature-arc covariance,
            O(N^4), then contracted).
``scaling`` Time and peak memory against N (one sentence), with fitted log-log slopes, and
            a plot (``--plot docs/img/scaling.png``).
``peers``   torch-struct's ``NonProjectiveDependencyCRF`` and a plain ``slogdet`` + autograd
            entropy at B = 32, N = 40, float64, with value checks against ours.
``engine``  This engine against itself at an older git revision (``--against``).

Scores come from a seeded random biaffine scorer (random word vectors -> random biaffine
form plus a distance prior), so they have some realistic structure without a trained
parser. Every comparison runs its contenders round-robin on the same inputs; times are
medians over the repeats. ``--threads`` (default 1) sets torch's intra-op threads;
``--device cuda`` runs table1, ge, scaling and peers on a GPU (inputs made on the CPU from
the same seeds, then moved; timers wait for the GPU's queue; peak memory from CUDA's
allocator).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from collections import Counter
from pathlib import Path
from statistics import median

import torch

from benchmarks.common import (ROOT, fmt_mib, fmt_ms, fresh_process, interleaved, interleaved_chunks, machine,
                               markdown_table, peak_memory, seconds, setup)
from objectives import baselines as bl
from objectives.conventions import arc_mask
from objectives.expectations import covariance_with_arcs, entropy, expectation
from objectives.mtt import log_partition_and_marginals
from parser.data.sentences import read_conllu
from parser.drawing import new_figure, save
from parser.fetch import default_root

# name, file, paper's mean length, entropy and speed-up (arXiv v1 / TACL)
LANGUAGES = (
    ("Finnish", "UD_Finnish-TDT/fi_tdt-ud-test.conllu", 9.23, 0.6092, 3.4, 4.1),
    ("English", "UD_English-EWT/en_ewt-ud-test.conllu", 12.45, 0.8264, 4.5, 5.4),
    ("German", "UD_German-GSD/de_gsd-ud-test.conllu", 17.56, 0.8933, 6.0, 7.3),
    ("French", "UD_French-GSD/fr_gsd-ud-test.conllu", 24.65, 0.8923, 8.1, 10.2),
    ("Arabic", "UD_Arabic-PUD/ar_pud-ud-test.conllu", 36.05, 0.7163, 12.2, 15.1),
)
ENGLISH = LANGUAGES[1][1]


# --------------------------------------------------------------------------- data and scores


def read_treebank(path: Path) -> list[tuple[list[str], list[str], list[int]]]:
    """Sentences as (forms, UPOS tags, heads) over syntactic words (the project's reader)."""
    return [(s.words, s.upos, s.heads) for s in read_conllu(path)]


class RandomBiaffine:
    """A seeded random biaffine arc scorer: no training, but scores with structure.

    Each word form gets a fixed random vector (seeded by a hash of the lower-cased form);
    heads and dependents are ``tanh`` projections of ``[vector; position features]``; the
    arc score is ``scale * head^T U dep - distance * log(1 + |h - m|)``. Constants were
    chosen once so that UD sentences get roughly 0.5-1 nats of entropy per word, the range
    of the paper's (trained) parser.
    """

    def __init__(self, dim: int = 32, scale: float = 2.5, distance: float = 1.5, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.dim, self.scale, self.distance = dim, scale, distance
        self.head = torch.randn(dim + 4, dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
        self.dep = torch.randn(dim + 4, dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
        self.bilinear = torch.randn(dim, dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
        self.root = torch.randn(dim, generator=g, dtype=torch.float64)
        self._vectors: dict[str, torch.Tensor] = {}

    def vector(self, form: str) -> torch.Tensor:
        key = form.lower()
        if key not in self._vectors:
            seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") % 2**62
            self._vectors[key] = torch.randn(self.dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        return self._vectors[key]

    def __call__(self, forms: list[str]) -> torch.Tensor:
        """``(N+1, N+1)`` float64 arc scores ``[h, m]`` for one sentence (0 = root)."""
        n = len(forms)
        x = torch.stack([self.root] + [self.vector(f) for f in forms])
        pos = torch.arange(n + 1, dtype=torch.float64) / max(n, 1)
        feats = torch.stack([pos, pos**2, torch.sin(6.28 * pos), (torch.arange(n + 1) == 0).double()], 1)
        x = torch.cat([x, feats], 1)
        head, dep = torch.tanh(x @ self.head), torch.tanh(x @ self.dep)
        idx = torch.arange(n + 1, dtype=torch.float64)
        prior = -self.distance * torch.log1p((idx[:, None] - idx[None, :]).abs())
        return self.scale * head @ self.bilinear @ dep.T + prior


def pad(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack per-sentence ``(n+1, n+1, ...)`` scores or features into ``(B, N+1, N+1, ...)``
    (padding 0), with the lengths ``(B,)``."""
    size = max(t.shape[0] for t in tensors)
    out = torch.zeros(len(tensors), size, size, *tensors[0].shape[2:], dtype=tensors[0].dtype)
    for b, t in enumerate(tensors):
        out[b, : t.shape[0], : t.shape[0]] = t
    return out, torch.tensor([t.shape[0] - 1 for t in tensors])


def moved(device: str, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """``tensors`` on ``device`` (inputs are made on the CPU, so every device sees the same)."""
    return [t.to(device) for t in tensors]


def length_buckets(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices of length-sorted batches (the usual way to batch a test set). Timings
    alternate the contenders batch by batch, the one-by-one routes doing the batch's
    sentences one at a time."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]


def subsample(items: list, count: int | None, seed: int) -> list:
    if count is None or count >= len(items):
        return list(items)
    g = torch.Generator().manual_seed(seed)
    keep = sorted(torch.randperm(len(items), generator=g)[:count].tolist())
    return [items[i] for i in keep]


# --------------------------------------------------------------------------- reference routes


def entropy_and_grad(function, scores: torch.Tensor, lengths: torch.Tensor):
    x = scores.detach().clone().requires_grad_()
    value = function(x, lengths)
    (grad,) = torch.autograd.grad(value.sum(), x)
    return value.detach(), grad


def slogdet_marginals(scores: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log Z (single-root: slogdet of the Koo et al. Laplacian, :mod:`objectives.baselines`) and the
    marginals as ``autograd.grad(log Z, create_graph=True)``: gradients of anything built from
    them are double backwards through the determinant."""
    if not scores.requires_grad:
        scores.requires_grad_()
    log_z = bl._mtt_log_partition(scores, lengths, False)
    (mu,) = torch.autograd.grad(log_z.sum(), scores, create_graph=True)
    return log_z, mu


def slogdet_entropy(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Plain autograd entropy: ``log Z - sum mu * s`` from :func:`slogdet_marginals`."""
    log_z, mu = slogdet_marginals(scores, lengths)
    mask = arc_mask(lengths, scores.shape[-1] - 1)
    return log_z - (mu * scores.masked_fill(~mask, 0.0)).sum((-2, -1))


def druck_smith_feature_arc_covariance(scores: torch.Tensor, lengths: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``Cov(f_k, 1_e)`` for every feature k and arc e by Druck & Smith (2009), eq. 2:
    ``mu_e f_ek - w_e sum_e' w_e' f_e'k X[e', e] X[e, e']`` with all O(N^4) arc pairs
    materialised. Written here from the baselines' D&S helpers (``_inverse_view``,
    ``_pair_term``) because ``druck_smith_covariance`` wants the one-hot arcs as an
    ``(N+1)^2``-dimensional ``s``, which does not fit in memory at N = 50.
    ``(B, N+1, N+1)``, ``(B, N+1, N+1, K)`` -> ``(B, K, N+1, N+1)``; also returns E[f] ``(B, K)``.
    """
    w, x = bl._inverse_view(scores, lengths, False)
    mu = w * bl._first_order(x)
    f = bl._masked_values(f, lengths)
    pairs = bl._pair_term(x)  # (B, N+1, N+1, N+1, N+1): the O(N^4) object
    cross = torch.einsum("bhmk,bhmxy->bkxy", w[..., None] * f, pairs)
    return mu[:, None] * f.movedim(-1, 1) - w[:, None] * cross, (mu[..., None] * f).sum((1, 2))


# --------------------------------------------------------------------------- part 1: Table 1


def one_by_one(route, items: list, chunks: list[list[int]]):
    """An :func:`interleaved_chunks` contender: piece c calls ``route`` on each item of chunk c in turn."""
    return lambda c: [route(*items[i]) for i in chunks[c]]


def batched(route, batches: list):
    """An :func:`interleaved_chunks` contender: piece c calls ``route`` once, on batch c."""
    return lambda c: route(*batches[c])


def with_grad(function):
    """``function(scores, lengths)`` with the gradient of its sum (:func:`entropy_and_grad`)."""
    return lambda s, n: entropy_and_grad(function, s, n)


# Table 1's routes to the entropy (the first batched, the others one sentence at a time)
ENTROPIES = {"ours batched": entropy, "ours 1-by-1": entropy, "S&E loop": bl.smith_eisner_entropy,
             "S&E vectorised": bl.smith_eisner_entropy_batched}


def part_table1(args) -> str:
    scorer = RandomBiaffine()
    rows_main, rows_grad = [], []
    for name, path, paper_len, paper_h, paper_arxiv, paper_tacl in LANGUAGES[: args.languages]:
        sentences = read_treebank(default_root() / path)
        full_len = sum(len(s[0]) for s in sentences) / len(sentences)
        chosen = subsample(sentences, args.sentences, seed=1)
        singles = [(scorer(forms)[None], torch.tensor([len(forms)])) for forms, _, _ in chosen]
        chunks = length_buckets([len(forms) for forms, _, _ in chosen], args.batch_size)
        batches = [moved(args.device, *pad([singles[i][0][0] for i in ids])) for ids in chunks]
        singles = [moved(args.device, *single) for single in singles]
        count, words = len(singles), sum(len(forms) for forms, _, _ in chosen)

        # values: ours vs S&E (loop), per sentence
        ours = torch.cat([entropy(s, n) for s, n in singles])
        ours_b = torch.cat([entropy(s, n) for s, n in batches])  # (length-sorted order)
        diff_h = (ours - torch.cat([bl.smith_eisner_entropy(s, n) for s, n in singles])).abs().max().item()
        diff_g = max((entropy_and_grad(entropy, s, n)[1] - entropy_and_grad(bl.smith_eisner_entropy_batched, s, n)[1])
                     .abs().max().item() for s, n in singles[:50])
        assert abs(ours.sum() - ours_b.sum()) < 1e-8 * max(1.0, ours.sum().item())
        nats = ours.sum().item() / words

        contenders = {}
        for prefix, wrap in (("H ", lambda function: function), ("H+grad ", with_grad)):
            for route, function in ENTROPIES.items():
                contenders[prefix + route] = (batched(wrap(function), batches) if route == "ours batched"
                                              else one_by_one(wrap(function), singles, chunks))
        ms = {k: median(v) / count for k, v in interleaved_chunks(contenders, len(chunks), args.repeats).items()}
        for prefix, rows in (("H ", rows_main), ("H+grad ", rows_grad)):
            t = {k.removeprefix(prefix): v for k, v in ms.items() if k.startswith(prefix)}
            entropy_only = prefix == "H "
            rows.append([name, f"{count}/{len(sentences)}", f"{full_len:.2f} ({paper_len})", f"{words / count:.2f}",
                         *([f"{nats:.3f} / {nats / math.log(2):.3f} ({paper_h})"] if entropy_only else []),
                         *(fmt_ms(t[k]) for k in ENTROPIES), f"**{t['S&E loop'] / t['ours 1-by-1']:.1f}x**",
                         f"{t['S&E loop'] / t['ours batched']:.1f}x", f"{t['S&E vectorised'] / t['ours 1-by-1']:.1f}x",
                         *([f"{paper_arxiv} / {paper_tacl}", f"{diff_h:.1e} / {diff_g:.1e}"] if entropy_only else [])])
        print(f"  {name}: done", file=sys.stderr)
    header = ["language", "sentences", "mean length, full test set (paper)", "mean length, timed"]
    times = [f"{route} (ms)" for route in ENTROPIES]
    speedups = ["S&E loop / ours 1-by-1", "S&E loop / ours batched", "S&E vect. / ours 1-by-1"]
    main = [*header, "entropy nats / bits per word (paper)", *times, *speedups, "paper speed-up (arXiv / TACL)",
            "max abs diff H / grad vs S&E"]
    return (f"Entropy, ms per sentence:\n\n{markdown_table(main, rows_main)}\n\n"
            "Entropy + gradient (autograd through each method), ms per sentence:\n\n"
            + markdown_table(header + times + speedups, rows_grad))


# --------------------------------------------------------------------------- part 2: GE gradient


def ge_pairs(sentences, top: int = 20) -> list[tuple[str, str]]:
    """The ``top`` most frequent (parent UPOS, child UPOS) pairs over gold arcs (parent
    ``ROOT`` for the root)."""
    counts = Counter()
    for _, tags, heads in sentences:
        for m, h in enumerate(heads):
            counts[("ROOT" if h == 0 else tags[h - 1], tags[m])] += 1
    return [p for p, _ in counts.most_common(top)]


def ge_features(sentence, pairs) -> tuple[torch.Tensor, torch.Tensor]:
    """``f_k(h -> m) = [(upos(h), upos(m)) == pair k]`` ``(1, N+1, N+1, K)`` and the gold
    counts ``(1, K)`` of one sentence."""
    _, tags, heads = sentence
    tag = ["ROOT"] + tags
    parent = torch.tensor([[t == p for p, _ in pairs] for t in tag], dtype=torch.float64)  # (N+1, K)
    child = torch.tensor([[t == c for _, c in pairs] for t in tag], dtype=torch.float64)
    f = parent[:, None, :] * child[None, :, :]
    gold = torch.stack([f[h, m + 1] for m, h in enumerate(heads)]).sum(0)
    return f[None], gold[None]


def ge_penalty(expected: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    difference = expected - target
    return (difference * difference).sum()


def ge_reverse(s, n, f, t):
    """(a) reverse mode through T1."""
    x = s.detach().clone().requires_grad_()
    (grad,) = torch.autograd.grad(ge_penalty(expectation(x, n, f), t), x)
    return grad


def ge_reverse_slogdet(s, n, f, t):
    """(a') reverse mode through a plain slogdet + autograd T1 (double backward)."""
    x = s.detach().clone().requires_grad_()
    _, mu = slogdet_marginals(x, n)
    expected = torch.einsum("bhm,bhmk->bk", mu, bl._masked_values(f, n))
    (grad,) = torch.autograd.grad(ge_penalty(expected, t), x)
    return grad


def ge_t2(s, n, f, t):
    """(b) T2 covariance route with R = 1: r = sum_k dF/dE[f_k] f_k."""
    with torch.no_grad():
        slope = 2 * (expectation(s, n, f) - t)  # (B, K)
        r = torch.einsum("bhmk,bk->bhm", f, slope)[..., None]
        return covariance_with_arcs(s, n, r, validate=False)[:, 0]


def ge_druck_smith(s, n, f, t):
    """(c) Druck & Smith: materialise Cov(f, 1_e) (K x N^2, O(N^4)), then contract."""
    with torch.no_grad():
        cov, expected = druck_smith_feature_arc_covariance(s, n, f)
        return torch.einsum("bk,bkhm->bhm", 2 * (expected - t), cov)


def part_ge(args) -> str:
    scorer = RandomBiaffine()
    sentences = [s for s in read_treebank(default_root() / ENGLISH) if 5 <= len(s[0]) <= 50]
    total = len(sentences)
    pairs = ge_pairs(sentences)
    five = next(x for x in sentences if len(x[0]) == 5)
    sentences = subsample(sentences, args.ge_sentences, seed=2)
    data = [ge_features(x, pairs) for x in sentences]
    singles = [(scorer(forms)[None], torch.tensor([len(forms)])) for forms, _, _ in sentences]
    items = [(s, n, f, t) for (s, n), (f, t) in zip(singles, data)]
    mean_len = sum(len(x[0]) for x in sentences) / len(sentences)

    # the D&S wrapper against the baseline's general D&S covariance and brute force (N = 5)
    s5, n5, f5 = scorer(five[0])[None], torch.tensor([5]), ge_features(five, pairs)[0]
    onehot = torch.eye(36, dtype=torch.float64).view(1, 6, 6, 36)
    ours5 = druck_smith_feature_arc_covariance(s5, n5, f5)[0].flatten(2)
    check_ds = (ours5 - bl.druck_smith_covariance(s5, n5, f5, onehot)).abs().max().item()
    check_brute = (ours5 - bl.brute_covariance(s5, n5, f5, onehot)).abs().max().item()

    routes = {"(a) reverse mode through T1": ge_reverse, "(a') reverse mode through slogdet + autograd T1": ge_reverse_slogdet,
              "(b) T2 covariance, R = 1": ge_t2, "(c) Druck & Smith, K x N^2 covariance": ge_druck_smith}
    diffs = {route: 0.0 for route in list(routes)[1:]}  # the largest gradient difference to (a)
    for item in items:
        a = ge_reverse(*item)
        for route in diffs:
            diffs[route] = max(diffs[route], (routes[route](*item) - a).abs().max().item())
    # batched variants of (a) and (b): length-bucketed batches of padded features
    chunks = length_buckets([int(x[1]) for x in items], args.batch_size)
    batches = []
    for ids in chunks:
        scores, lengths = pad([items[i][0][0] for i in ids])
        features, _ = pad([items[i][2][0] for i in ids])
        batches.append(moved(args.device, scores, lengths, features, torch.cat([items[i][3] for i in ids])))
    items = [moved(args.device, *item) for item in items]

    contenders = {name: one_by_one(route, items, chunks) for name, route in routes.items()}
    contenders |= {"(a) batched": batched(ge_reverse, batches), "(b) batched": batched(ge_t2, batches)}
    ms = {k: median(v) / len(items) for k, v in interleaved_chunks(contenders, len(chunks), args.repeats).items()}
    base = ms["(c) Druck & Smith, K x N^2 covariance"]
    paper = {"(a) reverse mode through T1": "26x (arXiv)", "(b) T2 covariance, R = 1": "9x (TACL)"}
    rows = [[k, fmt_ms(v), f"**{base / v:.1f}x**", paper.get(k, ""),
             f"{diffs[k]:.1e}" if k in diffs else ("-" if "batched" not in k else "")] for k, v in ms.items()]
    head = (
        f"{len(items)} of the {total} English-EWT test sentences with 5-50 words (mean length {mean_len:.2f}), "
        f"one sentence at a time unless batched (B={args.batch_size}); features: the 20 most frequent "
        f"(parent UPOS, child UPOS) gold pairs of those sentences ({', '.join(f'{p}>{c}' for p, c in pairs[:5])}, ...); "
        f"penalty sum_k (E[f_k] - gold count_k)^2. Check of the D&S route on a 5-word sentence: "
        f"max abs diff {check_ds:.1e} to `baselines.druck_smith_covariance` with one-hot arcs, "
        f"{check_brute:.1e} to brute force.\n\n"
    )
    return head + markdown_table(["route", "ms per sentence", "speed-up vs (c)", "paper", "max abs diff of gradient vs (a)"],
                                 rows)


# --------------------------------------------------------------------------- part 3: scaling


def random_sentence(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, n + 1, n + 1, generator=g, dtype=torch.float64), torch.tensor([n])


def random_features(n: int, k: int = 20, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse 0/1 features (each arc fires ~1/k of them, like UPOS pairs) and targets."""
    g = torch.Generator().manual_seed(seed)
    f = (torch.rand(1, n + 1, n + 1, k, generator=g) < 1.0 / k).double()
    return f, torch.rand(1, k, generator=g, dtype=torch.float64)


SCALING = {
    "ours: entropy": lambda s, n, f, t: entropy(s, n),
    "ours: entropy + grad": lambda s, n, f, t: entropy_and_grad(entropy, s, n),
    "slogdet + autograd: entropy + grad": lambda s, n, f, t: entropy_and_grad(slogdet_entropy, s, n),
    "S&E loop: entropy": lambda s, n, f, t: bl.smith_eisner_entropy(s, n),
    "S&E vectorised: entropy": lambda s, n, f, t: bl.smith_eisner_entropy_batched(s, n),
    "GE grad (a) reverse mode": ge_reverse,
    "GE grad (b) T2": ge_t2,
    "GE grad (c) Druck & Smith": ge_druck_smith,
}
DS_MAX = 80  # the (N+1)^4 pair term is 5 GiB at N = 160
HEAVY = ("S&E vectorised: entropy", "GE grad (c) Druck & Smith")


def slope(ns: list[int], ts: list[float]) -> float:
    """Least-squares slope of log t against log N."""
    x = [math.log(n) for n in ns]
    y = [math.log(t) for t in ts]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def part_scaling(args) -> str:
    ns = [n for n in args.lengths if not args.quick or n <= 40]
    results = {name: {} for name in SCALING}
    memory = {name: {} for name in SCALING}
    for n in ns:
        s, lengths, f, t = moved(args.device, *random_sentence(n), *random_features(n))
        active = {k: v for k, v in SCALING.items() if "Druck" not in k or n <= DS_MAX}
        inner = max(1, int(2000 / n**1.5)) if not args.quick else 1  # calls per timed sample

        def repeat(function):
            return lambda: [function(s, lengths, f, t) for _ in range(inner)]

        # the O(N^3)- and O(N^4)-memory methods are timed in their own round-robin: their
        # hundreds of MiB of allocations would otherwise slow whichever method runs next
        heavy = {k: v for k, v in active.items() if k in HEAVY}
        light = {k: v for k, v in active.items() if k not in HEAVY}
        times = interleaved({k: repeat(v) for k, v in light.items()}, 3 * args.repeats)
        times |= interleaved({k: repeat(v) for k, v in heavy.items()}, 3 * args.repeats)
        for k, v in times.items():
            results[k][n] = median(v) / inner
            memory[k][n] = peak_memory(lambda: active[k](s, lengths, f, t), args.device)
        print(f"  N={n}: done", file=sys.stderr)
    rows = []
    for name in SCALING:
        got = [n for n in ns if n in results[name]]
        tail = [n for n in got if n >= 40]
        cells = [f"{fmt_ms(results[name][n])} / {fmt_mib(memory[name][n])}" if n in results[name] else "-" for n in ns]
        fit_all = f"{slope(got, [results[name][n] for n in got]):.2f}" if len(got) > 1 else "-"
        fit_tail = f"{slope(tail, [results[name][n] for n in tail]):.2f}" if len(tail) > 1 else "-"
        rows.append([name] + cells + [fit_all, fit_tail])
    if args.plot:
        plot_scaling(ns, results, memory, args.plot)
    return "ms per call / peak memory allocated during the call (one sentence of N words):\n\n" + markdown_table(
        ["method"] + [f"N={n}" for n in ns] + ["slope, all N", "slope, N >= 40"], rows
    )


def plot_scaling(ns, results, memory, path: str) -> None:
    """Milliseconds and peak memory against N (log-log), a line per method of ``SCALING``."""
    fig = new_figure(11, 4.2, layout="tight")
    left, right = fig.subplots(1, 2)
    for name in SCALING:
        got = [n for n in ns if n in results[name]]
        style = "-" if name.startswith(("ours", "GE grad (a)", "GE grad (b)")) else "--"
        left.plot(got, [results[name][n] * 1e3 for n in got], style, marker="o", label=name)
        right.plot(got, [max(memory[name][n], 1) / 2**20 for n in got], style, marker="o", label=name)
    for ax, label in ((left, "ms per call"), (right, "peak memory (MiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sentence length N")
        ax.set_ylabel(label)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    fig.suptitle("One sentence, float64, CPU (1 thread)", fontsize=10)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save(fig, path, dpi=80)


# --------------------------------------------------------------------------- part 4: peers


def to_torch_struct(scores: torch.Tensor) -> torch.Tensor:
    """Ours ``[b, h, m]`` (h = 0 root) -> torch-struct's ``[b, h-1, m-1]`` with the root score
    of word m on the diagonal ``[b, m-1, m-1]`` (its ``phi(i, i)`` is (root, i))."""
    words = scores[:, 1:, 1:]
    eye = torch.eye(words.shape[-1], dtype=torch.bool, device=scores.device)
    return torch.where(eye, torch.diag_embed(scores[:, 0, 1:]), words)


def from_torch_struct(matrix: torch.Tensor) -> torch.Tensor:
    """Inverse layout map (column 0 and our diagonal get 0)."""
    n = matrix.shape[-1]
    out = matrix.new_zeros(matrix.shape[0], n + 1, n + 1)
    eye = torch.eye(n, dtype=torch.bool, device=matrix.device)
    out[:, 1:, 1:] = matrix.masked_fill(eye, 0.0)
    out[:, 0, 1:] = matrix.diagonal(dim1=-2, dim2=-1)
    return out


def torch_struct_entropy(scores: torch.Tensor, lengths: torch.Tensor, eps: float | None = None, multiroot: bool = False):
    """H = log Z - sum mu * s from torch-struct's partition and (closed-form) marginals.

    ``eps=None`` uses ``NonProjectiveDependencyCRF`` as shipped (it adds 1e-5 to every arc
    weight); ``eps=0.0`` calls its functions without that perturbation, to check values.
    """
    from torch_struct import NonProjectiveDependencyCRF
    from torch_struct.deptree import deptree_nonproj, deptree_part

    potentials = to_torch_struct(scores)
    if eps is None:
        dist = NonProjectiveDependencyCRF(potentials, lengths=lengths, multiroot=multiroot)
        log_z, mu = dist.partition, dist.marginals
    else:
        log_z = deptree_part(potentials, multiroot, lengths, eps=eps)
        mu = deptree_nonproj(potentials, multiroot, lengths, eps=eps)
    n = potentials.shape[-1]
    real = torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]
    real = real[:, :, None] & real[:, None, :]
    return log_z - (mu * potentials.masked_fill(~real, 0.0)).sum((-2, -1)), log_z, mu


def part_peers(args) -> str:
    import warnings

    warnings.filterwarnings("ignore", message=".*does not define `arg_constraints`.*")
    try:
        import torch_struct  # noqa: F401
    except ImportError:
        return "torch-struct is not installed (`pip install torch-struct`): peers skipped."
    batch, n = (8, 20) if args.quick else (32, 40)
    g = torch.Generator().manual_seed(3)
    scorer = RandomBiaffine()
    vocab = [f"w{i}" for i in range(500)]
    forms = [[vocab[i] for i in torch.randint(0, 500, (n,), generator=g).tolist()] for _ in range(batch)]
    scores = torch.stack([scorer(f) for f in forms])
    lengths = torch.full((batch,), n)
    ragged = torch.randint(1, n + 1, (batch,), generator=g)
    ragged[0] = n
    scores, lengths, ragged = moved(args.device, scores, lengths, ragged)

    # ---- value checks (also on a ragged batch and for the multi-root tree set)
    checks = []
    for label, lens in (("full", lengths), ("ragged", ragged)):
        for multiroot in (False, True):
            h_ours = entropy(scores, lens, multiroot)
            log_z, mu = log_partition_and_marginals(scores, lens, multiroot)
            for eps in (0.0, None):
                h_ts, z_ts, mu_ts = torch_struct_entropy(scores, lens, eps, multiroot)
                mu_ts = from_torch_struct(mu_ts.detach())
                gradient = ""
                if label == "full" and not multiroot:
                    g_ours = entropy_and_grad(entropy, scores, lens)[1]
                    g_ts = entropy_and_grad(lambda x, l: torch_struct_entropy(x, l, eps)[0], scores, lens)[1]
                    gradient = f"{(g_ts - g_ours).abs().max():.1e}"
                checks.append([label, "multi" if multiroot else "single", "1e-5 (default)" if eps is None else "0",
                               f"{(z_ts - log_z).abs().max():.1e}", f"{(mu_ts - mu).abs().max():.1e}",
                               f"{(h_ts - h_ours).abs().max():.1e}", gradient])
    g_ours = entropy_and_grad(entropy, scores, lengths)[1]
    g_plain = entropy_and_grad(slogdet_entropy, scores, lengths)[1]
    plain_diff = (g_plain - g_ours).abs().max().item()

    contenders = {
        "ours: entropy + grad": lambda: entropy_and_grad(entropy, scores, lengths),
        "torch-struct: entropy + grad": lambda: entropy_and_grad(lambda x, l: torch_struct_entropy(x, l)[0], scores, lengths),
        "slogdet + autograd: entropy + grad": lambda: entropy_and_grad(slogdet_entropy, scores, lengths),
        "ours: entropy": lambda: entropy(scores, lengths),
        "torch-struct: entropy": lambda: torch_struct_entropy(scores, lengths)[0],
        "ours: log Z + marginals": lambda: log_partition_and_marginals(scores, lengths),
        "torch-struct: log Z + marginals": lambda: (torch_struct_entropy(scores, lengths)[1:]),
    }
    ms = {k: median(v) for k, v in interleaved(contenders, args.repeats * 20).items()}
    rows = []
    for k, v in ms.items():
        ours_key = "ours: " + k.split(": ", 1)[1]
        rows.append([k, fmt_ms(v), f"{v / ms[ours_key]:.2f}x" if ours_key in ms else ""])
    return (f"B={batch}, N={n} (all full length), float64, single-root.\n\n"
            + markdown_table(["method", "ms per batch", "time / ours (same quantity)"], rows)
            + f"\n\nplain slogdet + autograd gradient vs ours: max abs diff {plain_diff:.1e}.\n\n"
            + "Values, torch-struct vs ours (max abs diff):\n\n"
            + markdown_table(["batch", "tree set", "torch-struct eps", "log Z", "marginals", "entropy", "entropy gradient"],
                             checks))


# --------------------------------------------------------------------------- engine: before / after


def load_objectives(revision: str):
    """The ``objectives`` package as it was at a git revision, imported under another name
    (for before/after timings on the same inputs)."""
    import importlib
    import subprocess
    import tempfile

    name = f"objectives_at_{revision.replace('-', '_').replace('~', '_').replace('^', '_')}"
    root = Path(tempfile.mkdtemp()) / name
    root.mkdir()
    files = subprocess.run(
        ["git", "ls-tree", "--name-only", revision, "objectives/"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for path in files:
        if path.endswith(".py"):
            source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True)
            (root / Path(path).name).write_text(source.stdout)
    sys.path.insert(0, str(root.parent))
    return importlib.import_module(name)


def load_engine(revision: str):
    """``objectives.expectations`` as it was at a git revision (see :func:`load_objectives`)."""
    import importlib

    return importlib.import_module(load_objectives(revision).__name__ + ".expectations")


def operations_per_call(function) -> int:
    """Tensor operations one call of ``function`` dispatches (``aten::`` ops not inside
    another one, by the profiler): the per-call overhead at small sizes, counted, so it
    can be compared on a loaded machine where timings of a few hundred microseconds
    cannot."""
    from torch.profiler import ProfilerActivity, profile

    function()  # caches and lazy imports out of the count
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        function()
    return sum(1 for e in profiled.events() if e.name.startswith("aten::")
               and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


def part_engine(args) -> str:
    from objectives import expectations as current

    before = load_engine(args.against)
    rows = []
    for batch, n in ((1, 12), (1, 40), (32, 40)):
        s = torch.randn(batch, n + 1, n + 1, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
        lengths = torch.full((batch,), n)
        f, t = random_features(n)
        f = f.expand(batch, -1, -1, -1).contiguous()
        t = t.expand(batch, -1)
        inner = 40 if batch == 1 else 5

        def timed(function):
            return lambda: [function() for _ in range(inner)]

        contenders = {}
        for tag, engine in (("before", before), ("after", current)):
            def reverse(engine=engine):
                x = s.clone().requires_grad_()
                (grad,) = torch.autograd.grad(ge_penalty(engine.expectation(x, lengths, f), t), x)

            def t2(engine=engine):
                with torch.no_grad():
                    r = torch.einsum("bhmk,bk->bhm", f, 2 * (engine.expectation(s, lengths, f) - t))[..., None]
                    engine.covariance_with_arcs(s, lengths, r, validate=False)

            contenders[f"entropy {tag}"] = timed(lambda engine=engine: engine.entropy(s, lengths))
            contenders[f"entropy + grad {tag}"] = timed(
                lambda engine=engine: entropy_and_grad(engine.entropy, s, lengths)
            )
            contenders[f"GE grad (a) {tag}"] = timed(reverse)
            contenders[f"GE grad (b) {tag}"] = timed(t2)
        ms = {k: median(v) / inner for k, v in interleaved(contenders, 5 * args.repeats).items()}
        for what in ("entropy", "entropy + grad", "GE grad (a)", "GE grad (b)"):
            old, new = ms[f"{what} before"], ms[f"{what} after"]
            ops = [operations_per_call(lambda tag=tag: contenders[f"{what} {tag}"]()) // inner for tag in ("before", "after")]
            rows.append([f"B={batch}, N={n}", what, fmt_ms(old), fmt_ms(new), f"**{old / new:.2f}x**", f"{ops[0]} / {ops[1]}"])
    return f"Engine at `{args.against}` (before) against the working tree (after), ms per call:\n\n" + markdown_table(
        ["batch", "quantity", "before (ms)", "after (ms)", "speed-up", "tensor ops per call (before / after)"], rows
    )



# --------------------------------------------------------------------------- GE memory


GE_CASES = ("entropy regulariser", "GE tag_pairs, reverse", "GE tag_pairs, t2")
# the richer feature families, in the working tree only: "+"-joined constraint set names
GE_FAMILY_CASES = ("GE tag_pairs+distances, t2", "GE tag_pairs+labels, reverse", "GE tag_pairs+labels, t2")


def ge_memory_inputs(batch: int, n: int, seed: int = 0):
    """Random float32 arc scores ``(B, N+1, N+1)`` (all sentences N words), label scores
    ``(B, N+1, N+1, 37)`` over the UD relations, random UD tags, the tag vocabulary."""
    from objectives.conventions import UD_RELATIONS, UPOS_TAGS

    g = torch.Generator().manual_seed(seed)
    scores = 2.0 * torch.randn(batch, n + 1, n + 1, generator=g)
    labels = torch.randn(batch, n + 1, n + 1, len(UD_RELATIONS), generator=g)
    upos = torch.randint(2, 2 + len(UPOS_TAGS), (batch, n + 1), generator=g)
    upos[:, 0] = 0
    return scores, labels, upos, torch.full((batch,), n), ("<pad>", "<unk>", *UPOS_TAGS)


def ge_memory_objective(case: str, revision: str | None, vocab):
    """The objective of ``case``, from the working tree or from ``objectives`` at ``revision``."""
    package = load_objectives(revision) if revision else __import__("objectives")
    if case == "entropy regulariser":
        return package.EntropyRegularizer()
    families, gradient = case.removeprefix("GE ").split(", ")
    constraints = families.split("+") if "+" in families else families
    if not hasattr(package, "ObjectiveContext"):  # the API before the setup hook
        objective = package.GeneralizedExpectation(constraints, gradient=gradient, upos_vocab=vocab, targets_from="labeled")
    else:
        from objectives.conventions import UD_RELATIONS

        objective = package.GeneralizedExpectation(constraints, gradient=gradient, targets_from="labeled")
        objective.setup(package.ObjectiveContext(stage="validate", tags=vocab, labels=UD_RELATIONS))
    objective.targets = torch.rand(len(objective.targets), generator=torch.Generator().manual_seed(1))
    return objective


def ge_memory_case(args) -> dict:
    """One case in this process: ms per loss + backward (median) and peak memory above the
    inputs (resident set via ``getrusage`` after a warm-up on a tiny batch, and torch's
    allocator via the profiler)."""
    import resource
    from dataclasses import dataclass

    from objectives.objective import Scores

    @dataclass
    class Batch:
        lengths: torch.Tensor
        upos: torch.Tensor

    scores, labels, upos, lengths, vocab = ge_memory_inputs(args.batch_size, args.n)
    objective = ge_memory_objective(args.case, args.against_ge, vocab)
    labeled = "labels" in args.case  # only then are label scores read (and trained)

    def step(scores=scores, labels=labels, batch=Batch(lengths, upos)):
        x = scores.clone().requires_grad_()
        y = labels.clone().requires_grad_() if labeled else None
        objective(Scores(x, y), batch).backward()

    tiny, tiny_labels, tiny_upos, tiny_lengths, _ = ge_memory_inputs(2, 3)
    step(tiny, tiny_labels, Batch(tiny_lengths, tiny_upos))  # loads lazily imported code, so that RSS counts tensors
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()  # the first call reaches the peak
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    allocated = peak_memory(step)
    times = [seconds(step) for _ in range(args.repeats)]
    return {"case": args.case, "seconds": median(times), "rss": rss, "allocated": allocated}


def part_ge_memory(args) -> str:
    """GE (tag_pairs, K = 595) loss + backward against the entropy regulariser on the same
    random scores, each case in a fresh process (interleaved over ``--repeats`` rounds)."""
    import json

    if args.case:
        return json.dumps(ge_memory_case(args))
    cases = [(case, None) for case in GE_CASES + GE_FAMILY_CASES]
    if args.against_ge:
        cases += [(case, args.against_ge) for case in GE_CASES[1:]]
    results: dict[tuple, list[dict]] = {case: [] for case in cases}
    rounds = 1 if args.quick else 3
    for _ in range(rounds):
        for case, revision in cases:
            command = ["ge-memory", "--case", case, "--n", str(args.n), "--batch-size", str(args.batch_size),
                       "--repeats", str(args.repeats), "--threads", str(args.threads)]
            results[(case, revision)].append(fresh_process("benchmarks.expectations",
                                                           command + (["--against-ge", revision] if revision else [])))
    keys = ("seconds", "rss", "allocated")
    base = {key: median([r[key] for r in results[(GE_CASES[0], None)]]) for key in keys}
    rows = []
    for (case, revision), runs in results.items():
        values = {key: median([r[key] for r in runs]) for key in keys}
        rows.append([case + (f" (at `{revision}`)" if revision else ""), fmt_ms(values["seconds"]),
                     f"{values['seconds'] / base['seconds']:.2f}x",
                     fmt_mib(values["rss"]), f"{values['rss'] / base['rss']:.2f}x",
                     fmt_mib(values["allocated"]), f"{values['allocated'] / base['allocated']:.2f}x"])
    header = ["objective", "ms (loss + backward)", "time / entropy", "peak RSS above inputs", "RSS / entropy",
              "peak allocated (torch)", "allocated / entropy"]
    return (f"B={args.batch_size}, N={args.n} (all full length), float32 scores, random UD tags, {rounds} fresh "
            f"processes per case (medians; in each, the median of {args.repeats} calls):\n\n" + markdown_table(header, rows))


# --------------------------------------------------------------------------- main

PARTS = {
    "table1": part_table1,
    "ge": part_ge,
    "scaling": part_scaling,
    "peers": part_peers,
    "engine": part_engine,
    "ge-memory": part_ge_memory,
}
STANDALONE = ("engine", "ge-memory")  # not in ``all``


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", default="all", choices=["all", *PARTS], help="all = table1 ge scaling peers")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny samples, 2 repeats")
    parser.add_argument("--sentences", type=int, default=300, help="table1: sentences sampled per language")
    parser.add_argument("--ge-sentences", type=int, default=None, help="ge: sentences sampled (default all 5-50 words)")
    parser.add_argument("--languages", type=int, default=len(LANGUAGES))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    parser.add_argument("--plot", default=None, help="scaling: write the plot here (PNG)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="table1, ge, scaling, peers: cpu or cuda")
    parser.add_argument("--against", default="5d6ff0c", help="engine: git revision of the 'before' engine")
    parser.add_argument("--against-ge", default=None, help="ge-memory: also time GE at this git revision")
    parser.add_argument("--n", type=int, default=60, help="ge-memory: sentence length")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # ge-memory: one case, in this process
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.ge_sentences, args.repeats, args.languages = 12, 12, 2, 2
    setup(args.threads)
    if args.case:
        print(part_ge_memory(args))
        return
    print(f"<!-- {machine()} -->\n")
    for name, part in PARTS.items():
        if args.part == name or (args.part == "all" and name not in STANDALONE):
            print(f"### {name}\n\n{part(args)}\n", flush=True)


if __name__ == "__main__":
    main()
