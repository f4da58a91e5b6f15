"""Byte-level language modelling: real offline text, next-byte targets, held-out text (a tail of
one stream; whole documents of the English corpus), loss per source."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.evaluation import get_task, train_and_score
from dogma_evolve.evaluation.reference_models import TinyAttentionLM
from dogma_evolve.evaluation.tasks.bytelm import BOS


def test_windows_are_next_byte_pairs_of_the_corpus():
    task = get_task("bytelm", seq_len=32)
    inputs, targets = task.batch(torch.Generator().manual_seed(1), 4)
    assert inputs.shape == targets.shape == (4, 32)
    assert (inputs[:, 0] == BOS).all()
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    train = bytes(task.train_text.tolist())
    for row in targets:
        assert bytes(row.tolist()) in train


def test_held_out_windows_come_from_the_tail_only():
    task = get_task("bytelm", seq_len=32)
    corpus = bytes(task.corpus.tolist())
    split = task.train_split_tokens
    assert corpus.startswith(bytes(task.train_text.tolist()))
    for _, targets in task.eval_batches(3, 4):
        for row in targets:
            assert corpus.find(bytes(row.tolist()), split - 32) >= split - 31


def test_a_named_file_is_the_corpus_and_bad_paths_are_one_line_errors(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"abcd" * 400)
    task = get_task(f"bytelm:{path}", seq_len=16)
    assert task.chance_accuracy == pytest.approx(0.25)
    with pytest.raises(ValueError, match="cannot read"):
        get_task(f"bytelm:{tmp_path / 'absent.txt'}")
    path.write_bytes(b"ab")
    with pytest.raises(ValueError, match="too short"):
        get_task(f"bytelm:{path}")


def test_a_small_transformer_beats_the_most_frequent_byte():
    torch.manual_seed(0)
    task = get_task("bytelm", seq_len=32)
    model = TinyAttentionLM(task.vocab_size, task.seq_len, width=48, layers=1)
    scores = train_and_score(model, task, steps=150, seed=0, batch_size=16)
    assert scores["accuracy"] > task.chance_accuracy + 0.05


def test_mqar_large_is_a_named_variant():
    task = get_task("mqar_large")
    assert task.num_values == 256 and task.vocab_size == 1 + 64 + 256
