"""A user's block kind in the library: loaded and pinned (`phenotype.plugins`), held to the
built-ins' contract (`phenotype.contract`), found through an entry point, refused by a worker
with other code, and carried by the standalone export or refused by it, naming the plugin.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from dogma_evolve.evaluation import EvalRequest, evaluate
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import decode, plugins
from dogma_evolve.phenotype.contract import check_kind, genome_doc
from dogma_evolve.phenotype.standalone.writer import StandaloneError, check_package, write_package
from tests.phenotype.plugin_helpers import EXAMPLES, loaded_plugin


def plugin_genome(kind: str = "gated_deltanet") -> Genome:
    return Genome.from_dict(
        genome_doc([{"base": "T", "kind": kind}, {"base": "A", "kind": "swiglu"}], d_model=16)
    )


def test_the_example_passes_the_contract_the_built_ins_pass_and_is_pinned_to_its_code():
    with loaded_plugin("gated_deltanet") as record:
        assert check_kind("gated_deltanet") == []
        assert check_kind("gated_deltanet", {"heads": 4}, bias=True) == []
        assert record["pinned"] == f"gated_deltanet#{record['fingerprint']}"
        assert record["code"] == str(EXAMPLES / "gated_deltanet.py")
        assert record["genes"]["gated_deltanet"]["role"] == "sequence"
        assert plugins.load(record["pinned"]) is record  # pinned to this code: the same record
        with pytest.raises(plugins.PluginError, match="fingerprint .* not 0000000000000000"):
            plugins.load("gated_deltanet#0000000000000000")


def test_a_worker_with_other_plugin_code_returns_a_crash_naming_it():
    with loaded_plugin("gated_deltanet"):
        genome = plugin_genome()
        request = EvalRequest(
            genome.to_yaml(), genome.id, "mqar", 2, plugins=("gated_deltanet#0000000000000000",), device="cpu"
        )
        result = evaluate(request)
    assert (
        result.status == "crash" and "plugin code on" in result.reason and "gated_deltanet" in result.reason
    )


def test_an_installed_entry_point_names_the_plugin_module(tmp_path, monkeypatch):
    dist = tmp_path / "my_kinds-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-kinds\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[dogma_evolve.kinds]\ndeltanet = gated_deltanet\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugins.resolve("deltanet") == "gated_deltanet"
    assert plugins.resolve("some.module") == "some.module"  # no entry point: a module path


def test_the_standalone_package_carries_the_plugin_block(tmp_path):
    with loaded_plugin("gated_deltanet"):
        genome = plugin_genome()
        torch.manual_seed(0)
        model = decode(genome).eval()
        ids = torch.randint(0, 61, (2, 9))
        with torch.no_grad():
            expected = model(ids)
        info = write_package(model, genome, tmp_path)
        assert "gated_deltanet" in info["modules"] and info["kinds"] == ["gated_deltanet", "swiglu"]
        copied = (tmp_path / "dogma_model" / "plugins" / "gated_deltanet.py").read_text()
        assert "from ..blocks.base import BlockConfig" in copied and "from .._genome import" in copied
        check_package(info["package"], ids, expected)  # its logits are the phenotype's


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("import yaml\n", r"gated_yaml:\d+: imports yaml, which the package cannot carry"),
        (
            "from dogma_evolve.genome.schema import MAX_WIDTH\n",
            r"gated_yaml:\d+: imports MAX_WIDTH from genome",
        ),
    ],
)
def test_an_export_that_cannot_carry_the_plugin_is_refused_naming_it(tmp_path, source, reason):
    text = (
        (EXAMPLES / "gated_deltanet.py").read_text().replace('KIND = "gated_deltanet"', 'KIND = "gated_yaml"')
    )
    (tmp_path / "gated_yaml.py").write_text(text.replace("import torch\n", f"{source}import torch\n", 1))
    with loaded_plugin("gated_yaml", tmp_path):
        genome = plugin_genome("gated_yaml")
        with pytest.raises(StandaloneError, match=reason):
            write_package(decode(genome), genome, tmp_path / "out")
    assert not (tmp_path / "out" / "dogma_model").exists()


def test_a_plugin_inside_a_package_is_refused_by_the_export(tmp_path):
    package = tmp_path / "my_blocks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    text = (
        (EXAMPLES / "gated_deltanet.py").read_text().replace('KIND = "gated_deltanet"', 'KIND = "nested_gdn"')
    )
    (package / "gdn.py").write_text(text)
    with loaded_plugin("my_blocks.gdn", tmp_path) as record:
        assert record["kinds"] == ["nested_gdn"]
        genome = plugin_genome("nested_gdn")
        with pytest.raises(StandaloneError, match="plugin my_blocks.gdn: only a one-file top-level"):
            write_package(decode(genome), genome, tmp_path / "out")
    sys.modules.pop("my_blocks", None)


def test_peeking_at_future_tokens_fails_the_causality_check(tmp_path):
    text = (
        (EXAMPLES / "gated_deltanet.py").read_text().replace('KIND = "gated_deltanet"', 'KIND = "peek_gdn"')
    )
    peek = textwrap.dedent("""
        def _peek_forward(self, x):
            return _forward(self, x.roll(-1, 1))

        _forward, GatedDeltaNet.forward = GatedDeltaNet.forward, _peek_forward
    """)
    (tmp_path / "peek_gdn.py").write_text(text + peek)
    with loaded_plugin("peek_gdn", tmp_path):
        failed = {f.check: f.detail for f in check_kind("peek_gdn")}
    assert "causality" in failed and "step == forward" in failed
