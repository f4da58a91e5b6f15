"""Tasks: seeded, reproducible, and with the answers where the task says they are."""

import pytest
import torch

from dogma_evolve.evaluation import IGNORE_INDEX, TASKS, get_task
from dogma_evolve.evaluation.tasks.mqar import BLANK


def test_registry_lists_mqar_and_rejects_unknown_names_and_settings():
    assert "mqar" in TASKS
    with pytest.raises(ValueError, match="unknown task"):
        get_task("no-such-task")
    with pytest.raises(ValueError, match="bad settings"):
        get_task("mqar", no_such_setting=3)
    with pytest.raises(ValueError, match="seq_len"):
        get_task("mqar", num_pairs=4, seq_len=10)


def test_settings_rebuild_the_same_task():
    task = get_task("mqar", num_pairs=6, num_keys=12, seq_len=40)
    assert get_task(task.name, **task.settings()) == task


def test_default_mqar_shape_vocab_and_chance():
    task = get_task("mqar")
    inputs, targets = task.batch(torch.Generator().manual_seed(0), 5)
    assert inputs.shape == targets.shape == (5, task.seq_len)
    assert inputs.dtype == targets.dtype == torch.int64
    assert 0 <= int(inputs.min()) and int(inputs.max()) < task.vocab_size
    assert task.chance_accuracy == pytest.approx(1 / task.num_values)
    assert task.chance_accuracy <= 0.07  # low enough that "above chance" means something


@pytest.mark.parametrize("overrides", [{}, {"num_pairs": 5, "seq_len": 64}])
def test_batches_are_reproducible_from_the_generator_seed(overrides):
    task = get_task("mqar", **overrides)
    a = task.batch(torch.Generator().manual_seed(7), 16)
    b = task.batch(torch.Generator().manual_seed(7), 16)
    c = task.batch(torch.Generator().manual_seed(8), 16)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_train_and_eval_streams_are_separate_and_eval_is_fixed():
    task = get_task("mqar")
    train0 = task.batch(task.train_generator(0), 32)[0]
    train1 = task.batch(task.train_generator(1), 32)[0]
    held_out = task.eval_batches(2, 32)
    assert not torch.equal(train0, train1)
    assert not torch.equal(train0, held_out[0][0])
    again = task.eval_batches(2, 32)
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(held_out, again, strict=True))


def _reconstruct_targets(task, row):
    """Independent oracle: read the key->value bindings from the context, then expect
    the bound value after every key that appears in the query part."""
    n = task.num_pairs
    context = row[: 2 * n].tolist()
    keys, values = context[0::2], context[1::2]
    binding = dict(zip(keys, values, strict=True))
    expected = []
    for position, token in enumerate(row.tolist()):
        is_query = position >= 2 * n and 1 <= token <= task.num_keys
        expected.append(binding[token] if is_query else IGNORE_INDEX)
    return keys, values, expected


@pytest.mark.parametrize(
    "overrides",
    [{}, {"num_pairs": 6, "num_queries": 3, "seq_len": 41}, {"num_pairs": 8, "seq_len": 64}],
)
def test_mqar_answers_match_an_independent_reconstruction(overrides):
    task = get_task("mqar", **overrides)
    inputs, targets = task.batch(torch.Generator().manual_seed(3), 64)
    for row, target_row in zip(inputs, targets, strict=True):
        keys, values, expected = _reconstruct_targets(task, row)
        assert target_row.tolist() == expected
        # The pairs are well formed: distinct keys from the key range, distinct values
        # from the value range, so every query has exactly one right answer.
        assert len(set(keys)) == len(keys) and all(1 <= k <= task.num_keys for k in keys)
        assert len(set(values)) == len(values)
        assert all(task.num_keys < v < task.vocab_size for v in values)
        answered = target_row != IGNORE_INDEX
        assert int(answered.sum()) == task.num_queries
        # Next-token view: each answer is the token the input shows one step later.
        positions = answered.nonzero().flatten().tolist()
        for p in positions[:-1] if positions[-1] == task.seq_len - 1 else positions:
            assert int(row[p + 1]) == int(target_row[p])
        # Everything in the query part that is not a query or an answer is blank.
        query_part = row[2 * task.num_pairs :].tolist()
        used = {p - 2 * task.num_pairs for p in positions}
        used |= {p + 1 for p in used}
        assert all(t == BLANK for i, t in enumerate(query_part) if i not in used)


def test_queries_vary_in_position_when_there_is_room():
    task = get_task("mqar", num_pairs=4, seq_len=48)
    _, targets = task.batch(torch.Generator().manual_seed(0), 64)
    answer_maps = {tuple((row != IGNORE_INDEX).tolist()) for row in targets}
    assert len(answer_maps) > 10


# -- every registered task ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_is_seeded_in_range_and_has_answers(name):
    task = get_task(name)
    a = task.batch(torch.Generator().manual_seed(5), 8)
    b = task.batch(torch.Generator().manual_seed(5), 8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    inputs, targets = a
    assert inputs.shape == targets.shape == (8, task.seq_len)
    assert 0 <= int(inputs.min()) and int(inputs.max()) < task.vocab_size
    answered = targets != IGNORE_INDEX
    assert answered.any(dim=1).all()
    assert int(targets[answered].min()) >= 0 and int(targets[answered].max()) < task.vocab_size
    assert 0 < task.chance_accuracy < 0.5
    assert get_task(name, **task.settings()) == task


def _recall_oracle(task, row):
    """Drop noise tokens, cut the rest into (key span, value span) pairs, and expect the
    value after every key span that occurred before, at the original positions."""
    tokens = row.tolist()
    kept = [(p, t) for p, t in enumerate(tokens) if t < task.noise_offset]
    span = task.key_len + task.value_len
    expected = [IGNORE_INDEX] * len(tokens)
    binding = {}
    for start in range(0, len(kept), span):
        chunk = kept[start : start + span]
        key = tuple(t for _, t in chunk[: task.key_len])
        assert all(1 <= t < task.value_offset for t in key)
        value = [t for _, t in chunk[task.key_len :]]
        assert all(task.value_offset <= t < task.noise_offset for t in value)
        if key in binding:
            assert value[: len(binding[key])] == binding[key][: len(value)]  # consistent map
            predictors = [p for p, _ in chunk[task.key_len - 1 : span - 1]]
            for p, answer in zip(predictors, binding[key], strict=False):
                if p < len(tokens):
                    expected[p] = answer
        else:
            binding[key] = value
    return expected


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("in_context_recall", {}),
        ("noisy_recall", {}),
        ("noisy_recall", {"num_noise": 40, "num_pairs": 6}),
        ("fuzzy_recall", {}),
        ("fuzzy_recall", {"key_len": 3, "value_len": 1, "num_key_tokens": 3, "num_keys": 5}),
    ],
)
def test_recall_answers_match_an_independent_reconstruction(name, overrides):
    task = get_task(name, **overrides)
    inputs, targets = task.batch(torch.Generator().manual_seed(11), 32)
    for row, target_row in zip(inputs, targets, strict=True):
        assert target_row.tolist() == _recall_oracle(task, row)


def test_noisy_recall_really_has_noise_between_pairs():
    task = get_task("noisy_recall")
    inputs, _ = task.batch(torch.Generator().manual_seed(0), 16)
    noise = inputs >= task.noise_offset
    assert int(noise.sum(dim=1).min()) >= task.num_noise - 1  # the last may be cut off
    assert len({tuple(row.tolist()) for row in noise}) > 1  # noise positions vary


def test_selective_copying_targets_are_the_data_tokens_in_order():
    task = get_task("selective_copying")
    inputs, targets = task.batch(torch.Generator().manual_seed(2), 32)
    for row, target_row in zip(inputs, targets, strict=True):
        context = row[: task.context_len].tolist()
        data = [t for t in context if t >= 2]
        assert len(data) == task.num_tokens
        assert row[task.context_len :].tolist() == [1] * task.num_tokens
        assert target_row[task.context_len :].tolist() == data
        assert (target_row[: task.context_len] == IGNORE_INDEX).all()


def test_memorization_uses_one_table_for_every_sequence_and_seed():
    task = get_task("memorization")
    table = {}
    for seed in (0, 1):
        inputs, targets = task.batch(torch.Generator().manual_seed(seed), 64)
        for row, target_row in zip(inputs, targets, strict=True):
            for key, value in zip(row[0::2].tolist(), target_row[0::2].tolist(), strict=True):
                assert table.setdefault(key, value) == value
    assert len(table) > 200  # most of the 256 keys were seen, all consistently
    other = get_task("memorization", table_seed=1)
    assert not torch.equal(other.table, task.table)
