"""GE under data parallelism: two gloo processes sum their batch counts before the penalty.

Each process holds half of a batch. The all-reduce is differentiable and its backward sums
the processes' (equal) gradients, so each process's score gradient is ``world_size`` times
the gradient of the one-process penalty of the whole batch w.r.t. its half; DDP, which
averages gradients over the processes, then gives the one-process parameter gradient.
"""

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from objectives.ge import GeneralizedExpectation
from objectives.objective import ObjectiveContext, Scores

from .oracle import UPOS_VOCAB, make_batch, ready
from .test_ge import CONSTRAINTS

WORLD = 2
LENGTHS = [5, 3, 4, 1, 2, 5]


def one_process(gradient, multiroot):
    """Loss and score gradient of the whole batch in one process."""
    scores, batch = make_batch(LENGTHS)
    arcs = scores.arcs.clone().requires_grad_()
    loss = ready(GeneralizedExpectation(CONSTRAINTS, gradient=gradient, weighting="count"), multiroot)(Scores(arcs), batch)
    loss.backward()
    return loss.detach(), arcs.grad


CASES = [("reverse", False, False), ("t2", True, True)]  # (gradient, multiroot, an explicit process group)


def halves(rank):
    """Process ``rank``'s rows of the batch, padded to its own longest sentence."""
    rows = slice(rank * len(LENGTHS) // WORLD, (rank + 1) * len(LENGTHS) // WORLD)
    return rows, int(torch.tensor(LENGTHS[rows]).max()) + 1


def worker(rank, port, folder):
    """Every case on this process's half of the batch; results saved to ``folder``."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        torch.set_num_threads(1)
        scores, batch = make_batch(LENGTHS)
        rows, n = halves(rank)
        half = type(batch)(batch.lengths[rows], batch.upos[rows, :n])
        results = []
        for gradient, multiroot, explicit_group in CASES:
            arcs = scores.arcs[rows, :n, :n].clone().requires_grad_()
            objective = GeneralizedExpectation(CONSTRAINTS, gradient=gradient, weighting="count")
            group = dist.new_group(list(range(WORLD))) if explicit_group else None
            objective.setup(ObjectiveContext(stage="fit", multiroot=multiroot, tags=UPOS_VOCAB))
            objective.process_group = group
            loss = objective(Scores(arcs), half)
            loss.backward()
            results.append((loss.detach(), arcs.grad))
        torch.save(results, f"{folder}/{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_give_the_gradient_of_one_process_on_both_halves(tmp_path):
    mp.spawn(worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        rows, n = halves(rank)
        for (gradient, multiroot, _), (rank_loss, rank_grad) in zip(CASES, torch.load(tmp_path / f"{rank}.pt")):
            loss, grad = one_process(gradient, multiroot)
            assert grad.abs().max() > 1e-3
            torch.testing.assert_close(rank_loss, loss, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(rank_grad, WORLD * grad[rows, :n, :n], rtol=1e-10, atol=1e-12)
            assert (grad[rows, n:] == 0).all() and (grad[rows, :, n:] == 0).all()  # the rest is padding
