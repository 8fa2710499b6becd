r"""The rollout stage: sample k completions per problem, verify each, append them to the resumable ledger.

Pipeline position: ingest -> decontaminate -> **rollout** -> score -> select -> curriculum. Reads
``pools/<pool>/problems.parquet``; appends to ``pools/<pool>/rollouts/<model>/part-*.parquet`` (schema.ROLLOUTS,
key (problem_id, model, sample_idx)); refreshes ``pools/<pool>/stats.parquet`` (``curate.rollout.stats``).

How a job is cut and why a crash loses nothing:

1. ``plan_shards``: candidate problems (``splits``, minus already-solved ones with ``only_unsolved``, first
   ``limit`` by sorted problem_id) are cut into fixed chunks of ``shard_size`` problems *before* looking at the
   ledger; each chunk keeps only its missing (problem, sample_idx) pairs, sample_idx in ``[0, n)``. Finished chunks
   drop out whole, so the remaining shards are the same on every re-run: same batches, same seeds, same
   completions.
2. ``run_shard``: generate, verify every completion with ``curate.verify.check_batch``, write the shard as ONE
   parquet file, atomically (temp file + rename), named by run id, chunk index and a digest of its keys. A shard
   either exists whole or not at all; running it again is a no-op.
3. ``finalize``: refresh the stats table (incremental), write the manifest.

Kill the process at any moment (SIGKILL included) and run the same command again: the plan recomputes what is
missing and does only that. Two runs of one model at once (a second ``curate rollout``, a nightly flow) never
generate a sample twice: ``run_shard`` first claims the shard's samples under the model ledger's lock
(``claim_shard``, through ``ledger.claim``), leaving out those in the ledger or claimed by a live run; a run that
finds the rest of its job claimed elsewhere waits for it (``_run_all``), and takes over the claims of a run that
died. Reads still deduplicate by key as a safety net. Part names, sample numbering (sample_idx in ``[0, n)``: the
free indices below n), atomic writes and reads are ``curate.rollout.ledger``'s.
``only_unsolved`` ignores the current run's own rows, so its candidate list, and with it the shards, also
stay fixed across a resume.

Scale-out (flows/): ``plan_shards`` -> map ``run_shard`` over workers -> ``finalize``. All three take picklable
arguments (``Workspace``, pool name, frozen ``RolloutConfig``, frozen ``Shard``).

Example ledger row: ``{"problem_id": "3f9c...", "model": "Qwen/Qwen2.5-Math-1.5B", "sample_idx": 3, "completion":
"... \\boxed{5}", "prompt_tokens": 61, "completion_tokens": 412, "finish_reason": "stop", "extracted_answer": "5",
"verdict": "correct", "correct": True, "reward": 1.0, "temperature": 1.0, "top_p": 1.0, "max_tokens": 4096,
"seed": 0, "backend": "vllm", "run_id": "r-1a2b3c4d5e6f", ...}``
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate import config as config_mod
from curate import io, prompts, verify
from curate import schema as S
from curate.errors import MissingInput
from curate.locks import lock_timeout
from curate.manifest import manifest_path as folder_manifest_path
from curate.progress import bar
from curate.prompts import INSTRUCTION as DEFAULT_INSTRUCTION
from curate.rollout import backends, ledger, model_check, stats
from curate.rollout.backends import HFOptions, OpenAIOptions, Request, Sampling
from curate.rollout.ledger import claims_dir, live_claims
from curate.rollout.vllm_engine import VLLMOptions
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped


BACKENDS = ("hf", "vllm", "openai")


@dataclass(frozen=True)
class RolloutConfig:
    """One rollout job (recipe key ``rollout``; answer-checking settings come from the recipe's ``verify``).

    model: HF id or local path (for ``openai``: the served model name); a relative path that exists under the
    workspace root is loaded from there (``Workspace.model_path``: a training run's models keep their ledger name
    when the workspace moves). revision: pin a hub revision.
    n: samples per problem (sample_idx 0..n-1; raising n later adds only the new indices).
    temperature / top_p / max_tokens / seed: sampling, recorded on every ledger row; temperature 0 is greedy.
    instruction: appended to the problem in the user turn of the chat template.
    splits: which problems to sample (test problems are evaluation sets). sources: only problems first read from
    these ingest sources (None: all). selection: only the problems of this selection (``selections/<name>/``:
    re-sampling a selection with fresh rollouts, which ``curate headroom`` and ``training run``'s ``measure``
    forecast its waste from). limit: first K problems by problem_id. run_tag: prefix of the job's run id;
    ``chain`` marks the rollouts a ``training run`` makes of its own models (they count as training rollouts for
    ``curate score``, see ``score.evidence.training_rollouts``).
    only_unsolved: skip problems the ledger already shows solved by this model (in an earlier run).
    shard_size: problems per shard (the unit of atomic writes and of resume).
    data_parallel_size / data_parallel_rank: this process takes the shards ``i % size == rank``.
    verify_workers: processes for answer checking (None: ``verify.workers``).
    prior: Beta prior (a, b) of the stats table's pass-rate posterior (None: keep the table's, else Beta(1, 1)).
    """

    model: str = ""
    backend: str = "hf"
    revision: str | None = None
    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 4096
    seed: int = 0
    instruction: str = DEFAULT_INSTRUCTION
    splits: tuple[str, ...] = ("train",)
    sources: tuple[str, ...] | None = None
    selection: str | None = None
    run_tag: str = "r"
    limit: int | None = None
    only_unsolved: bool = False
    shard_size: int = 64
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    hf: HFOptions = field(default_factory=HFOptions)
    vllm: VLLMOptions = field(default_factory=VLLMOptions)
    openai: OpenAIOptions = field(default_factory=OpenAIOptions)
    verify: verify.VerifyConfig = field(default_factory=verify.VerifyConfig)
    verify_workers: int | None = None
    prior: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise config_mod.ConfigError("rollout.model is required (an HF id, a local path, or a served name)")
        if self.backend not in BACKENDS:
            raise config_mod.ConfigError(f"rollout.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.n < 1 or self.shard_size < 1 or self.max_tokens < 1:
            raise config_mod.ConfigError("rollout.n, rollout.shard_size and rollout.max_tokens must be >= 1")
        if not 0 <= self.data_parallel_rank < self.data_parallel_size:
            raise config_mod.ConfigError("rollout.data_parallel_rank must be in [0, data_parallel_size)")

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.max_tokens, self.seed)


def load_config(recipe: config_mod.Recipe) -> RolloutConfig:
    """The recipe's ``rollout`` mapping, with ``verify`` taken from the recipe's shared ``verify`` key and ``seed``
    (the sampling seed) defaulting to the recipe's."""
    data = recipe.seeded_config("rollout")
    if "verify" in data:
        raise config_mod.ConfigError("set answer-checking options under the recipe's top-level `verify:` key")
    cfg = config_mod.from_mapping(RolloutConfig, data, "rollout")
    return dataclasses.replace(cfg, verify=verify.load_config(recipe))


def run_id(cfg: RolloutConfig) -> str:
    """Id of a job: a hash of everything that shapes its samples (model, backend, sampling, instruction, n, and the
    backend settings of ``sample_settings``)."""
    keys = {
        "model": cfg.model,
        "revision": cfg.revision,
        "backend": cfg.backend,
        "n": cfg.n,
        "sampling": dataclasses.asdict(cfg.sampling),
        "instruction": cfg.instruction,
        "backend_settings": sample_settings(cfg),
    }
    return f"{cfg.run_tag}-" + hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:12]


def sample_settings(cfg: RolloutConfig) -> dict[str, Any]:
    """The backend settings that change what is sampled, beyond model, sampling and instruction.

    hf: ``generate_hf`` batches the rows of one shard and seeds each batch from its first row, so batch size and
    shard size decide which samples share a seed; device, dtype and CPU threads change the numerics; the engine
    (``engine: auto``) samples differently from ``generate`` (``hf``). vllm: dtype,
    tensor parallelism and context length change the numerics (each request has its own seed, so batching does not
    pick the random numbers). openai: the server, the endpoint and one request per sample or per problem (which
    seeds the server gets). Not included: progress, workers, retries, timeouts, data-parallel rank.
    """
    if cfg.backend == "hf":
        opts = cfg.hf
        return {
            "batch_size": opts.batch_size,
            "shard_size": cfg.shard_size,
            "device": opts.device,
            "dtype": opts.dtype,
            "threads": opts.threads,
            "engine": opts.engine,
        }
    if cfg.backend == "vllm":
        v = cfg.vllm
        return {"dtype": v.dtype, "tensor_parallel_size": v.tensor_parallel_size, "max_model_len": v.max_model_len}
    return {"base_url": cfg.openai.base_url, "api": cfg.openai.api, "request_n": cfg.openai.request_n}


# --------------------------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class WorkItem:
    """One problem of a shard with the sample indices still missing for it."""

    problem_id: str
    problem: str
    golds: tuple[str, ...]
    sample_idxs: tuple[int, ...]


@dataclass(frozen=True)
class Shard:
    """A fixed chunk of a job's problems (``index`` in the job's chunk list), restricted to its missing samples."""

    index: int
    run_id: str
    items: tuple[WorkItem, ...]

    @property
    def samples(self) -> int:
        return sum(len(i.sample_idxs) for i in self.items)

    @property
    def name(self) -> str:
        keys = ";".join(f"{i.problem_id}:{','.join(map(str, i.sample_idxs))}" for i in self.items)
        return ledger.part_name(self.run_id, f"{self.index:06d}", ledger.digest(keys))


def shard_path(ws: io.Workspace, pool: str, cfg: RolloutConfig, shard: Shard) -> Path:
    return ledger.part_path(ws, pool, cfg.model, shard.name)


def manifest_path(ws: io.Workspace, pool: str, model: str) -> Path:
    """``rollouts/<model>/manifest.json``: the model ledger's manifest (``manifest.manifest_path`` of its folder;
    ledger readers take ``part-*.parquet`` only)."""
    return folder_manifest_path(ledger.folder(ws, pool, model))


def _golds(answer: str | None, alternatives: list[str] | None) -> tuple[str, ...]:
    alts = [a for a in (alternatives or []) if a]
    return tuple(alts or ([answer] if answer else []))


def candidates(ws: io.Workspace, pool: str, cfg: RolloutConfig) -> tuple[pl.DataFrame, dict[str, int]]:
    """The job's problems in problem_id order, and how many of the pool's problems each filter left out."""
    cols = [S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SPLIT, S.SOURCE]
    problems = pl.read_parquet(ws.require_pool(pool), columns=cols).sort(S.PROBLEM_ID)
    excluded: dict[str, int] = {}
    keep = problems.filter(pl.col(S.SPLIT).is_in(list(cfg.splits)))
    excluded["split"] = problems.height - keep.height
    if cfg.sources is not None:
        before = keep.height
        keep = keep.filter(pl.col(S.SOURCE).is_in(list(cfg.sources)))
        excluded["other_source"] = before - keep.height
    if cfg.selection is not None:
        path = ws.selection_dir(cfg.selection) / "selection.parquet"
        if not path.is_file():
            raise MissingInput(f"rollout.selection: selection {cfg.selection!r} not found at {path}")
        before = keep.height
        keep = keep.join(pl.read_parquet(path, columns=[S.PROBLEM_ID]), on=S.PROBLEM_ID, how="semi")
        excluded["other_selection"] = before - keep.height
    if cfg.only_unsolved:
        led = ledger.read(ws, pool, cfg.model, columns=[S.CORRECT, S.RUN_ID])
        solved = led.filter(pl.col(S.CORRECT).fill_null(False) & (pl.col(S.RUN_ID) != run_id(cfg)))
        before = keep.height
        keep = keep.join(solved.select(S.PROBLEM_ID).unique(), on=S.PROBLEM_ID, how="anti")
        excluded["solved"] = before - keep.height
    if cfg.limit is not None:
        excluded["limit"] = max(0, keep.height - cfg.limit)
        keep = keep.head(cfg.limit)
    return keep, excluded


def plan_shards(ws: io.Workspace, pool: str, cfg: RolloutConfig) -> list[Shard]:
    """The shards of this job that still have missing samples (of this data-parallel rank), in order."""
    return _plan(ws, pool, cfg)[0]


def _plan(ws: io.Workspace, pool: str, cfg: RolloutConfig) -> tuple[list[Shard], dict[str, Any]]:
    """Shards, and where every pool problem went: ``pool = sum(excluded) + complete + other_rank + planned``."""
    keep, excluded = candidates(ws, pool, cfg)
    have = ledger.read(ws, pool, cfg.model, columns=[])
    done = have.group_by(S.PROBLEM_ID).agg(pl.col(S.SAMPLE_IDX))
    done_map = dict(zip(done[S.PROBLEM_ID].to_list(), done[S.SAMPLE_IDX].to_list(), strict=True))
    rid = run_id(cfg)
    shards = []
    rows = keep.to_dicts()
    counts = {"complete": 0, "other_rank": 0, "planned": 0}
    for index, start in enumerate(range(0, len(rows), cfg.shard_size)):
        chunk = rows[start : start + cfg.shard_size]
        if index % cfg.data_parallel_size != cfg.data_parallel_rank:
            counts["other_rank"] += len(chunk)
            continue
        items = []
        for row in chunk:
            missing = ledger.free_indices(set(done_map.get(row[S.PROBLEM_ID]) or ()), below=cfg.n)
            if missing:
                golds = _golds(row[S.ANSWER], row[S.ANSWER_ALTERNATIVES])
                items.append(WorkItem(row[S.PROBLEM_ID], row[S.PROBLEM], golds, missing))
        counts["complete"] += len(chunk) - len(items)
        counts["planned"] += len(items)
        if items:
            shards.append(Shard(index, rid, tuple(items)))
    return shards, {"pool": keep.height + sum(excluded.values()), "excluded": excluded, **counts}


# --------------------------------------------------------------------------------------------------- claims
@dataclass
class Claim:
    """A shard's samples claimed on the model's ledger (``ledger.claim``): ``shard`` is what is left to generate
    here, until ``release``."""

    shard: Shard
    held: ledger.Claim

    def release(self) -> None:
        self.held.release()


def claim_shard(ws: io.Workspace, pool: str, cfg: RolloutConfig, shard: Shard) -> Claim | None:
    """Claim what is still to do of ``shard``: the samples neither in the ledger nor claimed by a live run (a
    smaller shard, named by its own keys); None when nothing is left.

    Same config: both runs plan the same shards, so one takes a shard and the other skips it. Another shard size
    or ``n``: their shards overlap partly, and only the unclaimed samples are generated.
    """
    wanted = {i.problem_id: i.sample_idxs for i in shard.items}
    held = ledger.claim(ws, pool, cfg.model, wanted, run_id=shard.run_id)
    if held is None:
        return None
    items = tuple(
        dataclasses.replace(i, sample_idxs=held.keys[i.problem_id]) for i in shard.items if i.problem_id in held.keys
    )
    return Claim(shard if items == shard.items else Shard(shard.index, shard.run_id, items), held)


# --------------------------------------------------------------------------------------------------- one shard
def load_backend(cfg: RolloutConfig) -> None:
    """Load the model (hf) or engine (vllm) now, once per process, so generation timings exclude it."""
    if cfg.backend == "hf":
        backends.load_hf(cfg.model, cfg.revision, cfg.hf)
    elif cfg.backend == "vllm":
        from curate.rollout import vllm_engine as vllm_backend

        vllm_backend.load_engine(cfg.model, cfg.revision, cfg.vllm, cfg.seed)


def generate(cfg: RolloutConfig, requests: list[Request], on_done: backends.OnDone | None = None) -> list:
    """Dispatch to the configured backend (vLLM is imported only here, only when chosen)."""
    if cfg.backend == "hf":
        return backends.generate_hf(requests, cfg.model, cfg.sampling, cfg.hf, revision=cfg.revision, on_done=on_done)
    if cfg.backend == "openai":
        return backends.generate_openai(requests, cfg.model, cfg.sampling, cfg.openai, on_done=on_done)
    from curate.rollout import vllm_engine as vllm_backend

    return vllm_backend.generate_vllm(
        requests, cfg.model, cfg.sampling, cfg.vllm, revision=cfg.revision, on_done=on_done
    )


def ledger_rows(
    cfg: RolloutConfig, shard: Shard, completions: list, verdicts: list[verify.Verdict], now: dt.datetime
) -> pl.DataFrame:
    """Completions and their verdicts as ledger rows (schema.ROLLOUTS), sorted by (problem_id, sample_idx)."""
    values = {
        S.SAMPLE_IDX: [c.sample_idx for c in completions],
        S.COMPLETION: [c.text for c in completions],
        S.PROMPT_TOKENS: [c.prompt_tokens for c in completions],
        S.COMPLETION_TOKENS: [c.completion_tokens for c in completions],
        S.FINISH_REASON: [c.finish_reason for c in completions],
        S.EXTRACTED_ANSWER: [v.extracted for v in verdicts],
        S.VERDICT: [v.verdict for v in verdicts],
        S.CORRECT: [v.correct for v in verdicts],
        S.REWARD: [verify.reward_of(v, cfg.verify) for v in verdicts],
        S.TEMPERATURE: cfg.temperature,
        S.TOP_P: cfg.top_p,
        S.MAX_TOKENS: cfg.max_tokens,
        S.SEED: cfg.seed,
    }
    pids = [c.problem_id for c in completions]
    rows = ledger.build_rows(cfg.model, pids, values, backend=cfg.backend, run_id=shard.run_id, created_at=now)
    return rows.sort([S.PROBLEM_ID, S.SAMPLE_IDX])


def run_shard(
    ws: io.Workspace,
    pool: str,
    cfg: RolloutConfig,
    shard: Shard,
    *,
    on_done: backends.OnDone | None = None,
    timings: dict[str, float] | None = None,
) -> Path | None:
    """Generate, verify and write one shard atomically; a shard already on disk is not redone (idempotent).

    Other runs of the same model may be working at the same time (a second ``curate rollout``, Dask workers):
    the shard's samples are claimed first (``claim_shard``), so samples already in the ledger or being generated
    by a live run are left out, and the rest is generated once. Returns the part file written (the shard's own
    ``shard_path`` unless samples were left out), or None when nothing was left to do here.

    on_done: progress callback (samples, tokens) per finished batch. timings: seconds spent loading the model
    (first shard of a process only), generating and verifying are added under ``load_s``, ``generate_s``,
    ``verify_s``.
    """
    timings = {} if timings is None else timings
    if not shard.items:
        return None
    path = shard_path(ws, pool, cfg, shard)
    if path.exists():
        return path
    claim = claim_shard(ws, pool, cfg, shard)
    if claim is None:
        return None
    try:
        return _generate_shard(ws, pool, cfg, claim.shard, on_done, timings)
    finally:
        claim.release()


def _generate_shard(
    ws: io.Workspace,
    pool: str,
    cfg: RolloutConfig,
    shard: Shard,
    on_done: backends.OnDone | None,
    timings: dict[str, float],
) -> Path:
    path = shard_path(ws, pool, cfg, shard)
    messages = {i.problem_id: prompts.user_message(i.problem, cfg.instruction) for i in shard.items}
    requests = [
        Request(
            i.problem_id,
            messages[i.problem_id],
            i.sample_idxs,
            backends.request_seed(cfg.seed, i.problem_id, i.sample_idxs[0]),
        )
        for i in shard.items
    ]
    t0 = time.perf_counter()
    loadable = cfg if cfg.backend == "openai" else dataclasses.replace(cfg, model=ws.model_path(cfg.model))
    load_backend(loadable)
    timings["load_s"] = timings.get("load_s", 0.0) + time.perf_counter() - t0
    t0 = time.perf_counter()
    completions = generate(loadable, requests, on_done)
    t1 = time.perf_counter()
    want = {(i.problem_id, s) for i in shard.items for s in i.sample_idxs}
    got = [(c.problem_id, c.sample_idx) for c in completions]
    if len(got) != len(want) or set(got) != want:
        raise RuntimeError(f"shard {shard.name}: backend returned {len(got)} samples for {len(want)} wanted")
    golds = {i.problem_id: list(i.golds) for i in shard.items}
    verdicts = verify.check_batch(
        [c.text for c in completions],
        [golds[c.problem_id] for c in completions],
        cfg.verify,
        finish_reasons=[c.finish_reason for c in completions],
        prompts=[messages[c.problem_id] for c in completions],
        workers=cfg.verify_workers,
    )
    timings["generate_s"] = timings.get("generate_s", 0.0) + t1 - t0
    timings["verify_s"] = timings.get("verify_s", 0.0) + time.perf_counter() - t1
    frame = ledger_rows(cfg, shard, completions, verdicts, dt.datetime.now(dt.UTC))
    return ledger.write_part(frame, path)


def sampler(ws: io.Workspace, cfg: RolloutConfig) -> str:
    """What sampled the job: ``engine`` or ``generate`` for the hf backend (``backends.sampler_name``), else the
    backend's name (the model ledger's manifest records it beside the backend)."""
    if cfg.backend != "hf":
        return cfg.backend
    return backends.sampler_name(backends.load_hf(str(ws.model_path(cfg.model)), cfg.revision, cfg.hf)[1], cfg.hf)


# --------------------------------------------------------------------------------------------------- job
@io.pool_locked
def finalize(ws: io.Workspace, pool: str, cfg: RolloutConfig, *, force: bool = False) -> StageResult:
    """Refresh the stats table and summarize this job's rows, through ``run_wrapped``: skipped when the pool's
    ledger parts, the problems table, the config and the code are what the model ledger's manifest records.

    Inputs: the problems table and every ledger part of the pool (the stats cover every model). Outputs: the
    model's ledger folder (its manifest, ``manifest_path``) and ``stats.parquet``.
    """
    rid = run_id(cfg)
    folder, stats_path = ledger.folder(ws, pool, cfg.model), ws.table(pool, "stats")

    def work(_manifest) -> StageOutput:
        refreshed = stats.refresh_stats(ws, pool, prior=cfg.prior, force=force)
        cols = [S.VERDICT, S.CORRECT, S.COMPLETION_TOKENS, S.FINISH_REASON]
        rows = ledger.read(ws, pool, cfg.model, columns=cols, run_id=rid)
        verdicts = {k: int(v) for k, v in rows[S.VERDICT].value_counts().iter_rows()} if rows.height else {}
        ledger_rows_total = ledger.read(ws, pool, cfg.model, columns=[]).height
        summary: dict[str, Any] = {
            "pool": pool,
            "model": cfg.model,
            "backend": cfg.backend,
            "sampler": sampler(ws, cfg),
            "run_id": rid,
            "job_samples": rows.height,
            "job_problems": rows[S.PROBLEM_ID].n_unique() if rows.height else 0,
            "job_pass_rate": round(float(rows[S.CORRECT].mean()), 4) if rows.height else None,
            "job_mean_tokens": round(float(rows[S.COMPLETION_TOKENS].mean() or 0), 1) if rows.height else None,
            "verdicts": dict(sorted(verdicts.items())),
            "ledger_rows": ledger_rows_total,
            "stats": refreshed,
        }
        folder.mkdir(parents=True, exist_ok=True)
        return StageOutput(
            summary, rows_in=rows.height, rows_out=ledger_rows_total, extra={"run_id": rid, "verdicts": verdicts}
        )

    inputs = [ws.table(pool, "problems"), *ledger.files(ws, pool)]
    config = dataclasses.asdict(cfg) | {"run_id": rid, "pool": pool}
    return run_wrapped(ws, "rollout", inputs=inputs, config=config, outputs=[folder, stats_path], fn=work, force=force)


def rollout(
    ws: io.Workspace, pool: str, cfg: RolloutConfig, *, force: bool = False, progress: bool = False
) -> StageResult:
    """Plan, run every shard (with a progress bar), finalize: what ``curate rollout`` and ``run_stage`` call."""
    t0 = time.perf_counter()
    shards, problems = _plan(ws, pool, cfg)
    local = ws.model_path(cfg.model)
    if shards and cfg.backend != "openai" and Path(local).exists():  # a damaged model writes no row
        model_check.check_model(local)
    total = sum(s.samples for s in shards)
    generated = tokens = 0
    with bar(total, f"rollout {cfg.model}", enabled=progress and total > 0, unit="samples") as advance:

        def on_done(k: int, t: int) -> None:
            nonlocal generated, tokens
            generated += k
            tokens += t
            advance(k, tokens=t)

        timings = {"load_s": 0.0, "generate_s": 0.0, "verify_s": 0.0}
        left = _run_all(ws, pool, cfg, shards, on_done, timings)
    result = finalize(ws, pool, cfg, force=force)
    wall = time.perf_counter() - t0
    result.wall_s = wall
    result.skipped = not shards and result.skipped
    result.summary = {
        "problems": problems,
        "shards_run": len(shards),
        "samples_generated": generated,
        "tokens_generated": tokens,
        "tokens_per_s": round(tokens / timings["generate_s"], 1) if timings["generate_s"] > 0 else None,
        **{k: round(v, 2) for k, v in timings.items()},
        **result.summary,
    }
    if left:
        result.summary["left_to_other_runs"] = left
    return result


def _run_all(
    ws: io.Workspace,
    pool: str,
    cfg: RolloutConfig,
    shards: list[Shard],
    on_done: backends.OnDone,
    timings: dict[str, float],
    poll_s: float = 0.5,
) -> int:
    """Run every shard, then wait for the samples other live runs of the model claimed (taking over those of a run
    that dies), so that the job is complete on return. Waits at most the lock timeout (``locks.lock_timeout``);
    returns how many samples were still being generated elsewhere when it gave up (0 when complete)."""
    from curate.progress import log

    deadline = None
    while True:
        for shard in shards:
            run_shard(ws, pool, cfg, shard, on_done=on_done, timings=timings)
        shards = plan_shards(ws, pool, cfg)
        if not shards:
            return 0
        left = sum(s.samples for s in shards)
        limit = lock_timeout(ws.lock_timeout)
        if deadline is None:
            with ws.lock("ledger", f"{pool}/{cfg.model}"):
                owners = sorted({str(c["pid"]) for c in live_claims(claims_dir(ws, pool, cfg.model))})
            log(f"waiting for {left} sample(s) another rollout of {cfg.model} is generating (pid {', '.join(owners)})")
            deadline = time.monotonic() + limit if limit >= 0 else float("inf")
        if time.monotonic() > deadline:
            log(f"gave up waiting after {limit:g} s: {left} sample(s) are still being generated by another run")
            return left
        time.sleep(poll_s)


def run_stage(
    ws: io.Workspace, recipe: config_mod.Recipe, *, force: bool = False, progress: bool = False
) -> StageResult:
    """Stage wrapper: plan, run all shards, finalize. ``force`` recomputes the stats from the whole ledger.

    Generated rows are never regenerated (the ledger is append-only; delete part files to redo them); a job with
    nothing missing whose ``finalize`` finds the ledger as its manifest records it is reported as skipped.
    """
    return rollout(ws, recipe.pool, load_config(recipe), force=force, progress=progress)
