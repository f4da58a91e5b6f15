"""The default fitness `text`: held-out English-text loss as the share of the byte
frequencies' loss that the context explains (`evaluation.tasks.text`)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from dogma_evolve.evaluation import get_task
from dogma_evolve.evaluation.tasks.corpus import english_sources
from dogma_evolve.evaluation.trainer import quality_metrics, score


@pytest.fixture(scope="module")
def text():
    return get_task("text")


def test_the_frequencies_loss_matches_an_independent_float64_count(text):
    """U, recomputed from the corpus's own bytes with numpy in float64."""
    sources = english_sources()
    train = np.frombuffer(b"\n\n".join(s.train for s in sources), dtype=np.uint8)
    p = (np.bincount(train, minlength=256).astype(np.float64) + 1.0) / (len(train) + 256)
    expected = np.mean([-np.log(p[np.frombuffer(s.held_out, dtype=np.uint8)]).mean() for s in sources])
    assert text.unigram_loss == pytest.approx(expected, rel=1e-9)
    assert 2.5 < text.unigram_loss < math.log(257)  # English bytes: well below uniform


def test_quality_is_one_minus_the_loss_over_the_frequencies_loss(text):
    u = text.unigram_loss
    assert text.quality_of_loss(u) == pytest.approx(0.0)
    assert text.quality_of_loss(0.0) == 1.0
    assert text.quality_of_loss(u / 2) == pytest.approx(0.5)
    assert text.quality_of_loss(math.log(257)) < 0  # an untrained model is below the frequencies
    assert math.isnan(text.quality_of_loss(float("nan")))


class Frequencies(nn.Module):
    """Ignores the context: every position predicts the training text's byte frequencies."""

    def __init__(self, task):
        super().__init__()
        counts = torch.bincount(task.train_text.long(), minlength=257).double() + 1.0
        counts[256] = 1e-30  # the start token never follows
        self.logits = nn.Parameter(torch.log(counts / counts.sum()).float())

    def forward(self, inputs):
        return self.logits.expand(*inputs.shape, -1)


def test_a_model_of_the_frequencies_alone_scores_about_zero(text):
    """The fitness the search selects on, end to end through `score`: context-free
    prediction is quality ≈ 0 (held-out windows, not the whole held-out text: ±0.03)."""
    model = Frequencies(text)
    scored = score(model, text, batch_size=16, eval_batches=8)
    metrics = quality_metrics(text, scored)
    assert metrics["quality"] == pytest.approx(1 - scored.loss / text.unigram_loss)
    assert abs(metrics["quality"]) < 0.03


def test_its_settings_name_the_english_corpus_and_the_suite_s_batch(text):
    assert text.train_batch_size == 16 and text.seq_len == 64 and text.vocab_size == 257
    assert get_task(text.name, **text.settings()) == text
    with pytest.raises(ValueError, match="English corpus"):
        get_task("text", corpus_name="pydoc")
    bytelm = get_task("bytelm_en")  # the accuracy-scored variant stays as it was
    assert bytelm.train_batch_size == 32 and bytelm.name == "bytelm"


def test_its_settings_are_checked_without_reading_the_text():
    """A stored run's config names `text` (every `evolve report` builds it): the pinned
    corpus's sizes (`corpus.HELD_OUT_MIN_BYTES`, `TOTAL_BYTES`) check the settings, the 7 MB
    are read and stripped where a model trains or a loss is scored."""
    english_sources.cache_clear()
    task = get_task("text")
    assert english_sources.cache_info().currsize == 0
    with pytest.raises(ValueError, match="too short for windows of 300000"):
        get_task("text", seq_len=300_000)
    assert english_sources.cache_info().currsize == 0
    assert task.unigram_loss > 0 and english_sources.cache_info().currsize == 1  # read on first use
