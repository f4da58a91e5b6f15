"""A run's configuration: `RunConfig`, every check on it, and its command-line options.

Every check lives in `RunConfig.__post_init__` (a `ValueError` with a one-line reason),
including the search space's own (`SearchSpace.check_config`), so the library and the
`evolve run` command refuse the same configurations with the same words.

A field with `cli(...)` metadata is an `evolve run` option: `--field-name` (or the
metadata's `flag`), its type from the field's annotation (a `tuple[str, ...]` is a comma
list), its help from the metadata. `evolution.cli.run` builds the options from
`evolution.cli.options.cli_fields()`; fields without the metadata are settable from the library only.
"""

from __future__ import annotations

import math
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from dogma_evolve.evaluation.budget import BUDGETS
from dogma_evolve.evaluation.options import PRECISIONS
from dogma_evolve.evolution.objectives import OBJECTIVES, QUALITY, check_objectives
from dogma_evolve.evolution.scale.defaults import LADDER_TOKENS_PER_PARAM
from dogma_evolve.evolution.spaces.registry import SPACES
from dogma_evolve.evolution.strategies import PARENTS, STRATEGIES, STRATEGY_HELP

# quality (normalised accuracy on the suite) that a candidate must reach to count as having
# learned anything: the MLP-only calibration model scores under it (evaluation/tasks/suite.py)
QUALITY_FLOOR = 0.05
MAX_TIMEOUT_S = 30 * 86_400.0  # as evolve scale and ablate allow
DEFAULT_GENERATIONS = 3  # with the default text budget: about 10 minutes on 2 cores
DEFAULT_POPULATION = 64  # without an evaluation budget
MIN_BUDGET_POPULATION = 4  # the smallest population `budget_population` gives
# The defaults resolved in `RunConfig.__post_init__` from other fields. They are None (typed as
# the field's type: every RunConfig holds the resolved int) so that no value a user can type,
# such as 0, means "the default"; 0 is refused by the bounds like any value under them.
AUTO_POPULATION: int = typing.cast(int, None)  # DEFAULT_POPULATION, or sized to --evaluations
AUTO_STRATEGY: str = typing.cast(str, None)  # `default_strategy(objectives)`
SINGLE_OBJECTIVE_STRATEGY = "local"  # won NAS-Bench-201 on the tuning seeds (docs/results.md)
AUTO_SURROGATE: int = typing.cast(int, None)  # `default_surrogate(objectives, multi_fidelity)`
SINGLE_OBJECTIVE_SURROGATE = 10  # children bred per one trained, under quality alone
# the surrogate's exploration: a share of the children, its predicted best of a random sample of
# the whole space, `explore_pool` genomes (the name stored run configs and `--explore-pool` carry;
# a "pool" elsewhere is the evaluation pool) (chosen on NAS-Bench-201's tuning seeds, docs/results.md)
EXPLORE = 0.6
EXPLORE_POOL = 200
AUTO_PARENTS: int = typing.cast(int, None)  # `default_parents(multi_fidelity)`
AUTO_CONFIRM: int = typing.cast(int, None)  # `default_confirm(space)`
CONFIRM_SEEDS = 3  # a trained space's best: the mean of this many training seeds
# The bounds of every size a run is given, (least, most); most None: no upper bound. The
# maxima lie far beyond any run this program can carry out, and refuse a mistyped value
# before it exhausts the machine (`RunConfig._check_bounds`; fields absent are skipped).
MAX_POPULATION = 100_000
SIZE_BOUNDS: dict[str, tuple[int, int | None]] = {
    "population": (2, MAX_POPULATION),
    "initial_population": (2, MAX_POPULATION),
    "batch": (1, MAX_POPULATION),
    "sample_size": (1, MAX_POPULATION),
    "parents": (1, MAX_POPULATION),
    "generations": (0, 1_000_000),
    "max_evaluations": (1, 100_000_000),
    "steps": (1, 10_000_000),
    "min_steps": (0, 10_000_000),
    "repeats": (1, 100),
    "confirm": (1, 100),
    "surrogate": (1, 1_000),
    "explore_pool": (0, 100_000),
    "workers": (1, 1_024),
    "max_params": (1, None),
    "max_state_bytes": (1, None),
    "seed": (-(2**63) + 1, 2**63 - 1),
    "target_params": (1, None),
    "ladder_elites": (1, 1_000),
    "ladder_tokens": (1, None),
    "ladder_seeds": (2, 100),
}
SELECT_BY = ("search", "ladder", "long")  # what names a run's best individual (`select_by`)
PROMOTE_BY = ("loss", "quality")  # what ranks a multi-fidelity first stage (`promote_by`)
MAX_BRED = 10 * MAX_POPULATION  # children bred a generation: surrogate x batch
DEFAULT_OBJECTIVES = (QUALITY,)  # select on quality; parameters are a budget and a tie-break
# what a run stored without an `objectives` entry selected on (the default before this one)
STORED_OBJECTIVES = (QUALITY, "params")


@dataclass(frozen=True)
class CliOption:
    """How a `RunConfig` field appears on the command line."""

    help: str
    flag: str | None = None  # default: --field-name
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


def cli(
    help: str, *, flag: str | None = None, metavar: str | None = None, choices: tuple[str, ...] | None = None
) -> dict[str, CliOption]:
    """Field metadata that makes the field an `evolve run` option."""
    return {"cli": CliOption(help, flag, metavar, choices)}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run; stored with it so `resume` needs nothing else."""

    # -- `evolve run` options, in the order --help lists them --------------------------------
    population: int = field(  # resolved in __post_init__ (`budget_population`)
        default=AUTO_POPULATION,
        metadata=cli(
            f"individuals kept each generation (default {DEFAULT_POPULATION}; with --evaluations N: "
            "N/10, between 4 and 64, so that generation 0 is a tenth of the budget)"
        ),
    )
    initial_population: int | None = field(
        default=None,
        metadata=cli(
            "genomes in generation 0 (default: --population); a larger first generation is a "
            "cheap random start the first selection cuts to --population"
        ),
    )
    generations: int | None = field(
        default=None,
        metadata=cli(
            f"offspring generations after the seeds (default {DEFAULT_GENERATIONS}; "
            "with --evaluations: until the budget is spent)"
        ),
    )
    steps: int = field(default=300, metadata=cli("training steps per evaluation (300)"))  # full fidelity
    task: str = field(  # several: fitness from the per-task results (evolution.evaluating)
        default="text",
        metadata=cli(
            "task, or a comma list of tasks (text: held-out English-text loss; suite: the synthetic "
            "capability probes); your own: MODULE:CLASS[?key=value&...], "
            "MODULE:CLASS@SETTINGS.yaml or an installed entry point's name"
        ),
    )
    budget: str = field(
        default="steps",
        metadata=cli(
            "steps: every candidate trains --steps steps; flops: every candidate trains for "
            "the compute of --steps steps of a dense model of half --max-params",
            choices=BUDGETS,
        ),
    )
    seed: int = field(default=0, metadata=cli("run seed (0)"))
    workers: int | None = field(default=None, metadata=cli("parallel evaluations (default: every core)"))
    ray_address: str | None = field(
        default=None, metadata=cli("join an existing Ray cluster (default: local)")
    )
    timeout_s: float = field(  # evaluation.trainer.Deadline: the limit grows with the pace
        default=60.0,
        metadata=cli(
            "seconds a candidate has to build and take its first steps; then its limit is ten "
            "times its projected time at that pace, so load slows a run but changes no result; "
            "a candidate that still times out is tried once more with four times the limit (60)",
            flag="--timeout",
            metavar="S",
        ),
    )
    max_params: int = field(  # applied before selection
        default=250_000, metadata=cli("hard parameter budget")
    )
    space: str = field(default="dogma", metadata=cli("search space (dogma)", choices=tuple(SPACES)))
    strategy: str = field(
        default=AUTO_STRATEGY,  # resolved in __post_init__ (`default_strategy`)
        metadata=cli(
            "; ".join(f"{name}: {text}" for name, text in STRATEGY_HELP.items())
            + f" (default {SINGLE_OBJECTIVE_STRATEGY}; nsga2 with several --objectives)",
            choices=tuple(STRATEGIES),
        ),
    )
    objectives: tuple[str, ...] = field(  # quality alone: costs are budgets and the tie-break
        default=DEFAULT_OBJECTIVES,
        metadata=cli(
            f"comma list starting with {QUALITY}, among {', '.join(OBJECTIVES)}; the default, "
            f"{QUALITY} alone, selects on quality (fewer parameters break ties; --max-params is the "
            f"budget); with costs ({QUALITY},params) NSGA-II trades them off. Either way the "
            "reported front is quality against parameters"
        ),
    )
    max_state_bytes: int | None = field(  # inference state at the task's context
        default=None, metadata=cli("hard inference-state budget")
    )
    memory_from: str | None = field(
        default=None,
        metadata=cli("start from that run's operator credit and elites", metavar="RUN_ID"),
    )
    max_evaluations: int | None = field(  # cache hits are free
        default=None, metadata=cli("budget of real evaluations", flag="--evaluations")
    )
    min_steps: int | None = field(
        default=50,
        metadata=cli(
            "multi-fidelity: train every child this many steps first, when below --steps (50; 0: off)"
        ),
    )
    promote: float = field(default=0.2, metadata=cli("multi-fidelity: fraction promoted (0.2)"))
    promote_by: str = field(  # `evolution.evaluating.Evaluator.promoted`
        default="loss",
        metadata=cli(
            "multi-fidelity under one objective: promote by the first stage's held-out loss "
            "or its quality (loss)",
            choices=PROMOTE_BY,
        ),
    )
    batch: int | None = field(
        default=None, metadata=cli("children per generation (default: half the population)")
    )
    sample_size: int = field(default=3, metadata=cli("aging: tournament sample (3)"))
    parents: int = field(  # resolved in __post_init__ (`default_parents`)
        default=AUTO_PARENTS,
        metadata=cli(
            "local: children are neighbours of the best N members (default 1 with a first stage, "
            f"whose losses rank one parent's neighbours but not several lineages; else {PARENTS})"
        ),
    )
    surrogate: int = field(  # resolved in __post_init__ (`default_surrogate`)
        default=AUTO_SURROGATE,
        metadata=cli(
            "breed K times the children, train the surrogate's predicted best and an exploration "
            f"share (default {SINGLE_OBJECTIVE_SURROGATE} on a space read at one fidelity; off, 1, "
            "with a first stage or several --objectives)"
        ),
    )
    repeats: int = field(
        default=1, metadata=cli("train each surviving child under this many seeds, select on the mean (1)")
    )
    confirm: int = field(  # `Evaluator.confirm`: the best is a mean, never one lucky draw
        default=AUTO_CONFIRM,  # resolved in __post_init__ (`default_confirm`)
        metadata=cli(
            "the population's best is re-trained until it holds as the mean of this many seeds; "
            f"the run's best is the best so confirmed (default {CONFIRM_SEEDS} on a space that trains, "
            "1 on a table space; 1: off)"
        ),
    )
    explore: float = field(
        default=EXPLORE,
        metadata=cli(
            "surrogate: share of children from the whole space, the predicted best of "
            f"--explore-pool random genomes ({EXPLORE})"
        ),
    )
    explore_pool: int = field(
        default=EXPLORE_POOL,
        metadata=cli(
            f"surrogate: random genomes the exploration share is chosen from ({EXPLORE_POOL}; 0: the "
            "share is bred children drawn at random)"
        ),
    )
    quality_floor: float | None = field(
        default=QUALITY_FLOOR,
        metadata=cli(
            "a candidate whose quality is below this ranks behind every one at or above it and "
            f"breeds only when fewer than two clear it ({QUALITY_FLOOR}; the suite's quality is "
            "normalised accuracy; -1: off)"
        ),
    )
    precision: str = field(
        default="auto",
        metadata=cli(
            "arithmetic candidates train in: auto (bf16 mixed precision on CUDA; on a CPU, bf16 "
            "only where a measured probe finds this CPU's bf16 matrix units pay, else fp32), "
            "fp32 or bf16; a cached result is reused only from the same precision",
            choices=PRECISIONS,
        ),
    )
    ladder: bool = field(
        default=False,
        metadata=cli(
            "after the last generation, train the Pareto elite at 4 sizes on bytelm_en (5 tokens "
            "per non-embedding parameter), fit L(N) = E + A·N^-α each and rank it by the loss "
            "extrapolated to --target-params"
        ),
    )
    target_params: float = field(
        default=1e6,
        metadata=cli("ladder: the non-embedding size the elite is ranked at (1000000)", metavar="N"),
    )
    ladder_sizes: tuple[str, ...] | None = field(
        default=None,
        metadata=cli(
            "ladder: parameter targets, comma list (default: each elite's own 4 sizes from its "
            "smallest model up 1.5 decades)",
            metavar="N,N,N,N",
        ),
    )
    ladder_elites: int = field(
        default=8,
        metadata=cli("ladder: this many elites, the Pareto front then the next best by quality (8)"),
    )
    select_by: str = field(
        default="search",
        metadata=cli(
            "the run's best (run output, report, export --best): search (quality at the search's size), "
            "long (its 4 best trained 1,000 steps, the best then) or ladder (--ladder's rank 1)",
            choices=SELECT_BY,
        ),
    )
    ladder_tokens_per_param: float = field(
        default=LADDER_TOKENS_PER_PARAM,
        metadata=cli(
            "ladder: training tokens per non-embedding parameter of every size (5; 20: compute-optimal)",
            metavar="R",
        ),
    )
    ladder_tokens: float | None = field(
        default=None,
        metadata=cli(
            "ladder: one token count for every size instead (fixed data: ranks which design learns "
            "most from D tokens, not a scaling law)",
            metavar="D",
        ),
    )
    plugins: tuple[str, ...] = field(
        default=(),
        metadata=cli(
            "a user's block kinds: modules (or installed dogma_evolve.kinds entry points) that "
            "register gene kinds and blocks, comma list; the search draws their kinds after "
            "the built-ins (docs/plugins.md)",
            flag="--plugin",
            metavar="MODULE[,MODULE]",
        ),
    )
    # -- library only -----------------------------------------------------------------------
    ladder_seeds: int = 2  # per size: an interval needs 2
    ladder_task: str = "bytelm_en"  # real English text, split by document (evaluation.tasks.corpus)
    ladder_axis: str = "both"
    ladder_timeout_s: float = 3_600.0  # per ladder point
    crossover_rate: float = 0.2
    seed_policy: str = "genome"  # genome | run (see evolution.evaluating)
    memory_parts: tuple[str, ...] = ("credit", "elites")  # what --memory-from inherits
    archive_size: int = 8
    policy_floor: float = 0.05
    # A user's own tasks (`evaluation.tasks.imported`), by their pinned text: import path,
    # settings, fingerprint of the code, and the contract's values, so that a run resumes
    # with the same code and a reader never imports it. Filled in by `__post_init__`.
    task_code: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    # A user's block kinds (`phenotype.plugins`), by their pinned text MODULE#FINGERPRINT:
    # module, fingerprint, where the code lay, each kind's role and gene spec as data, so
    # that a resume re-imports the same code and a reader shows genomes without it.
    plugin_code: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        objectives = tuple(self.objectives)
        object.__setattr__(self, "objectives", objectives)
        if self.strategy is AUTO_STRATEGY:
            object.__setattr__(self, "strategy", default_strategy(objectives))
        if self.population is AUTO_POPULATION:
            object.__setattr__(self, "population", budget_population(self.max_evaluations))
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds")
        if self.population < 2:
            raise ValueError("population must be at least 2")
        if self.initial_population is not None and self.initial_population < self.population:
            raise ValueError(
                f"initial_population must be at least population ({self.population}), "
                f"not {self.initial_population}"
            )
        if self.generations is not None and self.generations < 0:
            raise ValueError("generations must be at least 0")
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, not {self.budget!r}")
        if self.repeats < 1:
            raise ValueError("repeats must be at least 1")
        if not 0.0 <= self.explore <= 1.0:
            raise ValueError("explore must lie in [0, 1]")
        if not 0.0 < self.promote <= 1.0:
            raise ValueError("promote must lie in (0, 1]")
        if self.promote_by not in PROMOTE_BY:
            raise ValueError(f"promote_by must be one of {PROMOTE_BY}, not {self.promote_by!r}")
        if self.max_evaluations is not None and self.max_evaluations < 1:
            raise ValueError("evaluations must be at least 1")
        if self.steps < 1:
            raise ValueError("steps must be at least 1")
        check_objectives(objectives)
        if self.space not in SPACES:
            raise ValueError(f"space must be one of {tuple(SPACES)}, not {self.space!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {tuple(STRATEGIES)}, not {self.strategy!r}")
        if self.confirm is AUTO_CONFIRM:
            object.__setattr__(self, "confirm", default_confirm(self.space))
        if self.confirm < 1:
            raise ValueError("confirm must be at least 1")
        if self.parents is AUTO_PARENTS:
            object.__setattr__(self, "parents", default_parents(self.multi_fidelity))
        if self.surrogate is AUTO_SURROGATE:
            object.__setattr__(self, "surrogate", default_surrogate(objectives, self.multi_fidelity))
        if self.surrogate < 1:
            raise ValueError("surrogate must be at least 1 (1: off)")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.seed_policy not in ("genome", "run"):
            raise ValueError("seed_policy must be 'genome' or 'run'")
        if self.min_steps is not None and self.min_steps < 0:
            raise ValueError("min_steps must be at least 0 (0: off)")
        if not self.tasks:
            raise ValueError("no task given")
        object.__setattr__(self, "memory_parts", tuple(self.memory_parts))
        if not set(self.memory_parts) <= {"credit", "elites"}:
            raise ValueError("memory_parts are among credit, elites")
        self._check_bounds()
        self._check_ladder()
        # a user's task is imported here unless recorded; its pinned text names it from here on
        task, task_code = SPACES[self.space].pin_tasks(self.task, self.task_code)
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "task_code", task_code)
        self._pin_plugins()
        SPACES[self.space].check_config(self)

    def _pin_plugins(self) -> None:
        """Each plugin that `plugin_code` records stands in as its recorded genes (nothing
        imported: a stored run read back); any other is imported, checked and pinned
        (`phenotype.plugins.pin`, torch)."""
        from dogma_evolve.genome.kinds import register_recorded

        plugins = tuple(p.strip() for p in self.plugins if p.strip())
        if not plugins:
            return
        if self.space != "dogma":
            raise ValueError(f"--plugin adds block kinds to DOGMA genomes: the {self.space} space has none")
        records = {p: self.plugin_code[p] for p in plugins if p in self.plugin_code}
        if len(records) < len(plugins):
            from dogma_evolve.phenotype.plugins import pin

            plugins, records = pin(plugins, self.plugin_code)
        for record in records.values():  # a kind registered already (imported) is kept
            register_recorded(record["genes"])
        object.__setattr__(self, "plugins", plugins)
        object.__setattr__(self, "plugin_code", records)

    def _check_bounds(self) -> None:
        """Every size within `SIZE_BOUNDS`, so that a mistyped value is a one-line refusal
        before anything starts, not a run that hangs or dies natively."""
        for name, (low, high) in SIZE_BOUNDS.items():
            value = getattr(self, name, None)
            if value is not None and not (low <= value and (high is None or value <= high)):
                bounds = f"at least {low:,}" if high is None else f"in [{low:,}, {high:,}]"
                label = name.removeprefix("max_") if name == "max_evaluations" else name
                raise ValueError(f"{label} must be {bounds}, not {value:,}")
        if self.surrogate * self.children > MAX_BRED:
            raise ValueError(f"surrogate x batch must be at most {MAX_BRED:,} children a generation")

    def _check_ladder(self) -> None:
        """A ladder (of DOGMA genomes; sizes: 4+ numbers over 1.5 decades) and `select_by`."""
        r = self.ladder_tokens_per_param
        if not (isinstance(r, int | float) and math.isfinite(r) and 1e-3 <= r <= 1e6):
            raise ValueError(f"ladder_tokens_per_param must be a number in [0.001, 1000000], not {r!r}")
        if self.select_by not in SELECT_BY:
            raise ValueError(f"select_by must be one of {SELECT_BY}, not {self.select_by!r}")
        if self.select_by == "ladder" and not self.ladder:
            raise ValueError("--select-by ladder needs --ladder (the ladder ranks the elite)")
        if self.select_by == "long" and (self.space != "dogma" or "," in self.task):
            raise ValueError("--select-by long trains DOGMA finalists on one task, not a table or a list")
        if self.ladder and self.space != "dogma":
            raise ValueError(f"--ladder resizes DOGMA genomes: the {self.space} space has no sizes to climb")
        if self.ladder_sizes is None:
            return
        sizes = []
        for text in self.ladder_sizes:
            try:
                sizes.append(float(text))
            except ValueError:
                raise ValueError(f"ladder_sizes: {text!r:.30} is not a number") from None
        if len(set(sizes)) < 4 or min(sizes) < 1 or not all(math.isfinite(v) for v in sizes):
            raise ValueError("ladder_sizes: at least 4 different parameter counts, each at least 1")
        if math.log10(max(sizes) / min(sizes)) < 1.5 - 1e-9:
            raise ValueError("ladder_sizes must span at least 1.5 decades (a fit needs it)")
        object.__setattr__(self, "ladder_sizes", tuple(str(v) for v in self.ladder_sizes))

    @property
    def offspring_generations(self) -> float:
        """Generations of offspring to run: as configured, else without limit when an
        evaluation budget is given (the budget ends the run), else DEFAULT_GENERATIONS."""
        if self.generations is not None:
            return self.generations
        return math.inf if self.max_evaluations is not None else DEFAULT_GENERATIONS

    @property
    def children(self) -> int:
        """Children bred per generation: `batch`, else half the population (at least 1)."""
        return self.batch or max(1, self.population // 2)

    @property
    def first_fidelity(self) -> int | None:
        """The multi-fidelity first stage in steps, or None when training is single-stage."""
        return self.min_steps if self.min_steps and self.min_steps < self.steps else None

    @property
    def multi_fidelity(self) -> bool:
        """Whether children are screened by a first stage: one is set and the space can use it
        (NAS-Bench-201's table is read at one fidelity)."""
        return self.first_fidelity is not None and SPACES[self.space].supports_multi_fidelity

    @property
    def tasks(self) -> list[str]:
        return [t.strip() for t in self.task.split(",") if t.strip()]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["objectives"] = list(self.objectives)
        d["memory_parts"] = list(self.memory_parts)
        if not self.task_code:  # built-in tasks only: the dict of every run before user tasks
            del d["task_code"]
        if not self.plugins:  # built-in kinds only: the dict of every run before plugins
            del d["plugins"], d["plugin_code"]
        else:
            d["plugins"] = list(self.plugins)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """The config a run was stored with; a run stored before the quality floor existed
        resumes without one, and one stored before the precision option in fp32, as they
        started (a dict without a strategy, surrogate, population, parents, promote_by or
        explore_pool: nsga2, no surrogate, 64, the incumbent alone, promotion by quality, an
        exploration share of bred children drawn at random: the defaults of its time). A
        stored run carries its objectives (one stored before quality alone was the default
        resumes on its own, e.g. quality,params under NSGA-II); a dict without them takes
        `STORED_OBJECTIVES`."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known.setdefault("objectives", STORED_OBJECTIVES)
        known.setdefault("task", "suite")  # the default fitness before text
        known.setdefault("confirm", 1)  # a best was one draw before confirmation
        known.setdefault("quality_floor", None)
        known.setdefault("precision", "fp32")
        # the defaults before local search with a surrogate: a stored run resumes as it began
        known.setdefault("strategy", "nsga2")
        known.setdefault("surrogate", 1)
        known.setdefault("population", DEFAULT_POPULATION)
        known.setdefault("parents", 1)  # local search bred from the incumbent alone before
        known.setdefault("promote_by", "quality")  # the first stage promoted by quality before
        known.setdefault("explore_pool", 0)  # the exploration share was bred children at random
        return cls(**known)


def default_confirm(space: str) -> int:
    """The seeds a run's best is confirmed under: `CONFIRM_SEEDS` where candidates train (DOGMA,
    whose one training's luck the best would otherwise keep), 1 on a table space (NAS-Bench-201,
    whose benchmarks compare strategies at equal look-ups, each seed one of them)."""
    return CONFIRM_SEEDS if space == "dogma" else 1


def default_strategy(objectives: tuple[str, ...]) -> str:
    """The default strategy: restart local search on quality alone, NSGA-II when several
    objectives are asked for (local search follows quality only)."""
    return SINGLE_OBJECTIVE_STRATEGY if len(objectives) == 1 else "nsga2"


def default_parents(multi_fidelity: bool) -> int:
    """Local search's default breeders: the incumbent alone when the run has a first stage
    the space can use, else the best `PARENTS`. The first stage promotes by held-out loss,
    and early losses compare neighbours of one genome but not lineages: on the DOGMA
    benchmark's tuning seeds a weak second parent's children (an MLA model, 0.08 at 300
    steps) reached a lower 60-step loss than the incumbent's (a GPT-2-style model, 0.34) and
    took the full trainings, while among 40 neighbours of the GPT-2-style seed the two of
    lowest 60-step loss were the two best at 300 steps (docs/results.md). NAS-Bench-201 has
    no first stage, and there three parents beat one."""
    return 1 if multi_fidelity else PARENTS


def default_surrogate(objectives: tuple[str, ...], multi_fidelity: bool) -> int:
    """The default surrogate: 10 bred per trained child under quality alone on a space read
    at one fidelity, off (1) otherwise.

    Under several objectives the forest (it predicts quality only) picks the children of best
    predicted quality and thins the front's small end: on NAS-Bench-201's tuning seeds
    NSGA-II's hypervolume led Optuna's by +5.4 SE without it, and trailed it by 4.5 SE with it
    on the report seeds. With a first stage, the forest is fitted on the few full-fidelity
    results (16-40 rows in a DOGMA run) and the first stage screens the children anyway: on
    the DOGMA benchmark's tuning seeds the default without the surrogate was ahead by +0.017
    ± 0.009 (+1.9 SE, 10 seeds, ahead on 8), while on NAS-Bench-201 it is +3.7 SE for the
    surrogate (docs/results.md)."""
    if len(objectives) > 1 or multi_fidelity:
        return 1
    return SINGLE_OBJECTIVE_SURROGATE


def budget_population(evaluations: int | None) -> int:
    """The default population: DEFAULT_POPULATION without an evaluation budget, else a tenth
    of it between 4 and DEFAULT_POPULATION. A random generation 0 of 64 would be most of a
    100-evaluation budget (on NAS-Bench-201 the default was then random search with 36
    children, 13 SE behind Optuna's TPE); a tenth was the best of 6, 8, 10, 16 and 24 on the
    tuning seeds (docs/results.md)."""
    if evaluations is None:
        return DEFAULT_POPULATION
    return max(MIN_BUDGET_POPULATION, min(DEFAULT_POPULATION, evaluations // 10))


__all__ = [
    "DEFAULT_OBJECTIVES",
    "DEFAULT_POPULATION",
    "STORED_OBJECTIVES",
    "CliOption",
    "RunConfig",
    "budget_population",
    "default_parents",
    "default_strategy",
    "default_surrogate",
    "cli",
]
