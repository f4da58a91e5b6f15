"""Compression: values retrievable by position after a compress marker."""

from __future__ import annotations

import torch

from dogma_evolve.evaluation import IGNORE_INDEX, get_task, train_and_score
from dogma_evolve.evaluation.reference_models import MLPOnlyLM, TinyAttentionLM
from dogma_evolve.evaluation.tasks.compression import COMPRESS


def test_queries_ask_for_the_value_at_their_position():
    task = get_task("compression", length=6, num_queries=3)
    inputs, targets = task.batch(torch.Generator().manual_seed(3), 5)
    assert inputs.shape == (5, task.seq_len) and (inputs[:, 6] == COMPRESS).all()
    for row_in, row_t in zip(inputs, targets, strict=True):
        answered = (row_t != IGNORE_INDEX).nonzero().flatten().tolist()
        assert answered == [7, 8, 9]
        for t in answered:
            position = int(row_in[t]) - 1  # position tokens are 1..length
            assert row_t[t] == row_in[position]  # the value stored there
        assert len(set(row_in[7:].tolist())) == 3  # distinct positions are queried


def test_attention_retrieves_while_a_context_free_model_stays_at_chance():
    task = get_task("compression")
    torch.manual_seed(0)
    attention = train_and_score(TinyAttentionLM(task.vocab_size, task.seq_len), task, steps=300, seed=0)
    torch.manual_seed(0)
    mlp = train_and_score(MLPOnlyLM(task.vocab_size, task.seq_len), task, steps=300, seed=0)
    assert attention["accuracy"] > 0.5
    assert mlp["accuracy"] < 2.5 * task.chance_accuracy
