"""Export a trained phenotype as a standalone model directory (`--format standalone`, the
default) or as a Hugging Face directory (`--format hf`, `evolution.export.hf`).

    model.pt2             torch.export program: token ids (B, T) int64 -> logits (B, T, V)
    model.safetensors     the trained weights (shared tensors stored once)
    genome.yaml           the canonical genome
    example.safetensors   an `input` and the `output` the program must give for it
    README.md             a model card: metrics, lineage summary, how to load it
    dogma_model/          a self-contained, trainable Python package (phenotype.standalone.writer):
                          `dogma_model.load()` -> the nn.Module, with `step` for decoding

Loading needs torch alone: `torch.export.load("model.pt2").module()(ids)`; the package
needs torch and safetensors, and is checked to reproduce the phenotype's logits on the
example before the directory is put in place. Both formats write `genome.yaml`,
`example.safetensors` and a model card with the same provenance. The weights come
from the store's artifact when the run kept one, else the individual is re-trained from its
stored genome, seed and fidelity (a replay: deterministic on CPU).
The directory is written under a temporary name and renamed into place, so a failed export
leaves nothing half-written; an existing non-empty directory is refused.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save

from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import DogmaModel, account, decode
from dogma_evolve.phenotype.standalone.writer import check_package, write_package
from dogma_evolve.phenotype.weights import save_weights
from dogma_evolve.store import WEIGHTS_ARTIFACT, IndividualRecord, Store
from dogma_evolve.store.outage import is_disk_full


def trained_phenotype(store: Store, record: IndividualRecord, progress: Any = None) -> tuple[DogmaModel, str]:
    """The individual's trained model: from its stored weights, or by replaying training."""
    genome = Genome.from_yaml(record.yaml)
    model = decode(genome)
    blob = store.get_artifact(record.id, WEIGHTS_ARTIFACT)
    if blob is not None:
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            f.write(blob)
            f.flush()
            load_model(model, f.name)
        return model.eval(), "stored weights"
    from dogma_evolve.evaluation import EvalRequest, train_model
    from dogma_evolve.evaluation.precision import precision_of

    evaluation = own_evaluation(record)
    if evaluation is None or evaluation.status != "ok":
        raise UsageError(f"individual {record.id} has no successful evaluation to replay")
    if progress is not None:
        progress.print(
            f"no stored weights for individual {record.id}: re-training it "
            f"({evaluation.fidelity} steps, seed {evaluation.seed})"
        )
    request = EvalRequest(
        genome_yaml=record.yaml,
        genome_id=record.genome_id,
        task=evaluation.task,
        fidelity=int(evaluation.fidelity),
        seed=evaluation.seed,
        precision=precision_of(evaluation.metrics),  # as it trained (absent: fp32)
    )
    trained, result = train_model(request)
    if result.status != "ok" or not isinstance(trained, DogmaModel):
        raise UsageError(f"replaying individual {record.id} failed: {result.reason}")
    return trained.eval(), "replayed training"


def _export_program(model: DogmaModel, example: torch.Tensor) -> torch.export.ExportedProgram:
    """A program with dynamic batch and length where tracing allows it, else static shapes."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    length = torch.export.Dim("length", min=2, max=max(2, model.cfg.max_len))
    try:
        return torch.export.export(model, (example,), dynamic_shapes=({0: batch, 1: length},))
    except Exception:  # data-dependent control flow in some mixer: fall back to fixed shapes
        return torch.export.export(model, (example,))


FORMATS = ("standalone", "hf")


def export_individual(
    store: Store, record: IndividualRecord, out_dir: str, progress: Any = None, fmt: str = "standalone"
) -> dict[str, Any]:
    """Write the export directory for `record` in format `fmt`; return what was written."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "hf":
        from dogma_evolve.evolution.export.hf import require_transformers

        require_transformers()  # before any work: a replay can take minutes
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out_dir} exists and is not an empty directory")
    # The files are written beside the output folder and moved into place: that folder's
    # parent must exist and take a new folder, checked before any work.
    if not out.parent.is_dir():
        raise UsageError(f"cannot create {out_dir}: {out.parent} is not an existing folder")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    except OSError as e:
        raise UsageError(f"cannot create {out_dir}: {e.strerror or e}") from None
    try:
        genome = Genome.from_yaml(record.yaml)
        model, source = trained_phenotype(store, record, progress)
        evaluation = record.evaluation
        task_name = evaluation.task if evaluation else "mqar"
        from dogma_evolve.evaluation import get_task

        task = get_task(task_name)
        gen = torch.Generator().manual_seed(0)
        example, _ = task.batch(gen, 2)
        with torch.no_grad():
            expected = model(example)
        pair = {"input": example.contiguous(), "output": expected.contiguous()}
        (tmp / "example.safetensors").write_bytes(save(pair))
        (tmp / "genome.yaml").write_text(genome.to_yaml())
        provenance = model_provenance(store, record, genome, source, task)
        if fmt == "hf":
            from dogma_evolve.evolution.export.hf import write_hf_export

            written = write_hf_export(model, genome, tmp, example, expected, provenance)
        else:
            written = _write_standalone(model, genome, tmp, example, expected, provenance)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, Exception) and is_disk_full(error):
            raise UsageError(
                f"cannot export individual {record.id}: the file system holding {out.parent} is full "
                f"({error}); nothing was written: free space there, then export again"
            ) from None
        raise
    return {
        "id": record.id,
        "genome_id": record.genome_id,
        "directory": str(out),
        "format": fmt,
        "weights_from": source,
        **written,
        "files": sorted(p.name for p in out.iterdir()),
    }


def _write_standalone(
    model: DogmaModel,
    genome: Genome,
    tmp: Path,
    example: torch.Tensor,
    expected: torch.Tensor,
    provenance: str,
) -> dict[str, Any]:
    """model.pt2, model.safetensors, dogma_model/ (checked) and the card."""
    program = _export_program(model, example)
    dynamic = bool(program.range_constraints)
    # through memory: torch's own file writer aborts the process on a full disk, where a
    # write from Python raises ENOSPC (an OSError) that the caller reports in one line
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    (tmp / "model.pt2").write_bytes(buffer.getvalue())
    save_weights(model, tmp / "model.safetensors")
    package = write_package(model, genome, tmp)
    check_package(package["package"], example, expected)
    (tmp / "README.md").write_text(provenance + _standalone_loading(genome, dynamic, tuple(example.shape)))
    return {"dynamic_shapes": dynamic, "package_kinds": package["kinds"]}


def own_evaluation(record: IndividualRecord) -> Any:
    """The evaluation whose training the stored weights are (the engine keeps the weights of a
    child's own training): on the run's task, at the individual's own seed, the highest
    fidelity; a confirmed best also holds rows of further seeds, which are not these weights.
    Else the newest row on the run's task (None without one)."""
    newest = record.evaluation
    if newest is None:
        return None
    own = [e for e in record.evaluations if e.task == newest.task and e.seed == record.seed]
    return max(own, key=lambda e: (int(e.fidelity), e.id)) if own else newest


def seeds_line(record: IndividualRecord) -> str:
    """The card's line on a quality confirmed under several training seeds ("" for one)."""
    from dogma_evolve.evolution.objectives import seeds_text
    from dogma_evolve.evolution.rules import stored_result

    task = None if record.evaluation is None else record.evaluation.task
    _, metrics, _ = stored_result([e for e in record.evaluations if e.task == task])
    if len(metrics.get("quality_seeds") or ()) < 2:
        return ""
    return (
        f"Quality over its training seeds: {metrics['quality']:.4f}{seeds_text(metrics)}; "
        "the metrics below are those of the training these weights come from.\n"
    )


def model_provenance(store: Store, record: IndividualRecord, genome: Genome, source: str, task: Any) -> str:
    """The model card's provenance, the same in every format: the individual and its run,
    the genome, its metrics (those of the training the weights come from) and accounting, its
    lineage."""
    acct = account(genome, task.seq_len)
    own = own_evaluation(record)
    metrics = (own.metrics if own is not None else None) or {}
    ancestry = store.ancestry(record.id)
    seeds = [s for s in ancestry if not s.parents]
    ops: dict[str, int] = {}
    for s in ancestry:
        if s.operator:
            ops[s.operator] = ops.get(s.operator, 0) + 1
    return f"""# DOGMA phenotype {record.genome_id[:12]}

Individual {record.id} of run `{record.run_id}` (generation {record.generation}), exported by
DOGMA evolve. Weights: {source}.

    {genome.sequence_view()}

## Metrics ({task.name}, {metrics.get("steps", "?")} training steps)

{seeds_line(record)}
```json
{json.dumps(metrics, indent=2, sort_keys=True)}
```

| accounting | value |
| --- | --- |
| parameters | {acct.params:,} |
| active parameters | {acct.active_params:,} |
| FLOPs per token at context {task.seq_len} | {acct.flops_per_token:,} |
| inference state bytes per token | {acct.state_bytes_per_token:,} |
| fixed inference state bytes | {acct.state_bytes_fixed:,} |

## Lineage

{len(ancestry) - 1} ancestors back to {len(seeds)} seed(s); operators on the way:
{", ".join(f"{k} x{v}" for k, v in sorted(ops.items())) or "none (a seed)"}.
`evolve audit {record.id}` shows every step with its change.
"""


def _standalone_loading(genome: Genome, dynamic: bool, example_shape: tuple[int, ...]) -> str:
    """The standalone card's loading sections."""
    shapes = "dynamic batch and length" if dynamic else f"fixed shape {example_shape}"
    return f"""
## Loading (torch alone)

```python
import torch
from safetensors.torch import load_file

program = torch.export.load("model.pt2").module()   # {shapes}
example = load_file("example.safetensors")
logits = program(example["input"])                  # (B, T) int64 -> (B, T, {genome.structural["vocab"]})
assert torch.allclose(logits, example["output"], atol=1e-4)
```

## Fine-tuning (torch and safetensors)

`dogma_model/` is the same network as a Python package (DOGMA's block code, config
`dogma_model/config.json`, weights `dogma_model/model.safetensors`):

```python
import sys
sys.path.insert(0, ".")                             # the directory holding dogma_model/
import dogma_model

model = dogma_model.load()                          # nn.Module, eval mode, trainable
logits = model(example["input"])                    # equals example["output"]
state = model.init_state(batch_size)                # recurrent decoding, token by token:
logits_t, state = model.step(token_ids_t, state)    # (B,) -> (B, {genome.structural["vocab"]}), next state
model.train()                                       # then any optimizer
```
"""
