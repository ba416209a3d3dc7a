"""A listener serves any number of trainings: attached, detached and attached again."""

from __future__ import annotations

import torch

from trainperf import MemorySink, PerformanceListener
from trainperf.torch import attach


def test_a_listener_attached_again_after_detach_keeps_every_record_in_its_sinks():
    """Three trainings, each attached and detached, two models, one listener: its sinks get the
    windows of all three, numbered on, with every batch's samples."""
    memory = MemorySink()
    listener = PerformanceListener(2, sinks=[memory], report_hardware=False)

    def train(model: torch.nn.Module, steps: int) -> None:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(steps)]
        for x, y in torch.utils.data.DataLoader(data, batch_size=None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    first, second = torch.nn.Linear(8, 2), torch.nn.Linear(8, 2)
    for model in (first, second, first):
        handle = attach(model, listener)
        train(model, 4)
        handle.detach()
    listener.close()
    assert [r.iteration for r in memory.records] == [2, 4, 6, 8, 10, 12]
    assert [r.samples for r in memory.records] == [8] * 6


def test_a_listener_started_from_a_checkpoint_s_iteration_counts_on_from_it_when_attached():
    """``listener.start(iteration=200)`` before an attached loop (a run resumed from a checkpoint): the
    records are numbered from 200 on, and the goodput account starts there."""
    memory = MemorySink()
    listener = PerformanceListener(2, sinks=[memory], report_hardware=False)
    model = torch.nn.Linear(8, 2)
    attach(model, listener)
    listener.start(iteration=200)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(4)]
    for x, y in torch.utils.data.DataLoader(data, batch_size=None):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    listener.close()
    assert [r.iteration for r in memory.records] == [202, 204]
    assert listener.summary().goodput.net_progress == 4
