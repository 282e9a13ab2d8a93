"""Golden outputs in a pytest run: the files of ``--gpucompat-golden`` loaded once at start (a malformed one stops
the run with one line), each model hashed once, and per cell the check (figures recorded like the precision
suite's, the outcome said in the cell's report under ``golden``) and the recording into
``--gpucompat-record-golden``. Knows nothing of pytest: the fixtures hand it the cell's callbacks.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..catalog.base import Generation, RunInfo
from ..checks import outputs
from ..checks.golden import GoldenVerdict, judge
from ..checks.golden_files import GoldenFile, Match, Recorded, load_golden_source, match_golden, record
from ..common.errors import InputError
from ..workload.checkpoint import ModelIdentity, model_identity
from ..workload.matrix import MatrixCell
from ..workload.prompts import PromptSet


@dataclass
class GoldenRun:
    """This session's golden files and where to record, with the models' identities and tokenizers cached."""

    check_path: str | None
    files: tuple[GoldenFile, ...]
    record_dir: Path | None
    runner: str | None
    fingerprint: str
    _identities: dict[str, ModelIdentity] = field(default_factory=dict, repr=False)
    _tokenizers: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, check: str | None, record_into: str | None, runner: str | None,
             fingerprint: str) -> GoldenRun | None:
        """None when neither option is given; InputError for a golden path that does not exist, a malformed golden
        file (to check against, or already in the directory to record into) or a record path that is a file."""
        if not check and not record_into:
            return None
        files = load_golden_source(check) if check else ()
        target = Path(record_into) if record_into else None
        if target is not None:
            if target.exists() and not target.is_dir():
                raise InputError(str(target), None, "--gpucompat-record-golden needs a directory, this is a file")
            if target.is_dir():
                load_golden_source(target)  # a malformed file there would fail every cell's recording
        return cls(check_path=check, files=files, record_dir=target, runner=runner, fingerprint=fingerprint)

    @property
    def explicit(self) -> bool:
        """One golden file was named (rather than a directory): anything else in it is refused, not missing."""
        return self.check_path is not None and not Path(self.check_path).is_dir()

    def identity(self, model: Path) -> ModelIdentity:
        key = str(model)
        if key not in self._identities:
            self._identities[key] = model_identity(model)
        return self._identities[key]

    def match(self, model: Path, prompts: PromptSet, max_tokens: int, top_n: int) -> Match:
        return match_golden(self.files, self.identity(model), prompts.name, prompts.digest, max_tokens, top_n,
                            where=str(self.check_path), explicit=self.explicit)

    def with_text(self, model: Path, generations: Sequence[Generation]) -> tuple[Generation, ...]:
        """The generations with their decoded text (for people reading a golden file), when the model's tokenizer
        loads; as they are otherwise."""
        key = str(model)
        if key not in self._tokenizers:
            self._tokenizers[key] = None
            with contextlib.suppress(Exception):  # any tokenizer problem only costs the text
                from ..workload.prompts import has_tokenizer, load_tokenizer

                if has_tokenizer(model):
                    self._tokenizers[key] = load_tokenizer(model)
        tokenizer = self._tokenizers[key]
        if tokenizer is None:
            return tuple(generations)
        return tuple(replace(g, text=str(tokenizer.decode(list(g.token_ids)))) for g in generations)


@dataclass(frozen=True)
class CellGolden:
    """The golden side of one cell: ``check`` and ``record`` are no-ops without their option."""

    run: GoldenRun | None
    cell: MatrixCell
    model: Path
    prompts: PromptSet
    note: Callable[[str, Any], None]
    """Puts a key into the cell in the report."""
    record_metric: Callable[[str, float], None]

    @property
    def checking(self) -> bool:
        return self.run is not None and self.run.check_path is not None

    @property
    def recording(self) -> bool:
        return self.run is not None and self.run.record_dir is not None

    def check(self, candidate: Sequence[Generation], dtype_key: str, max_tokens: int, top_n: int,
              table: Mapping[str, Mapping[str, Any]] | None = None,
              info: RunInfo | None = None) -> GoldenVerdict | None:
        """The cell against the matching golden file: figures recorded, the outcome noted. None when not checking;
        a refused file is a verdict that did not pass (compared False), a missing one one that did. ``info``: what
        ran the cell; a recording made on another attention backend or KV-cache dtype is then noted with both."""
        if self.run is None or not self.checking:
            return None
        found = self.run.match(self.model, self.prompts, max_tokens, top_n)
        if found.golden is None:
            self.note("golden", {"status": found.status, "reason": found.reason})
            if found.status == "refused":
                return GoldenVerdict(False, False, f"golden refused: {found.reason}")
            return GoldenVerdict(False, True, found.reason)
        verdict = judge(found.golden, self.cell.id, candidate, dtype_key, table,
                        engine=info.engine if info is not None else self.cell.engine,
                        attention_backend=info.attention_backend if info is not None else None,
                        kv_cache_dtype=info.kv_cache_dtype if info is not None else None)
        for name, value in verdict.metrics.items():
            self.record_metric(name, value)
        status = "passed" if verdict.passed and verdict.compared else "failed" if verdict.compared else "not compared"
        reference = found.golden.reference
        self.note("golden", {"status": status, "file": Path(found.golden.source).name, "message": verdict.message,
                             "reference": None if reference is None else reference.kind,
                             "recorded_by": None if reference is None else reference.runner, **verdict.backends})
        return verdict

    def keep(self, candidate: Sequence[Generation], max_tokens: int, top_n: int) -> None:
        """Put the cell's outputs into its report (outputs.py), with or without golden options: what lets a merged
        fleet report or `gpucompat diff` compare runners output to output."""
        identity = self.run.identity(self.model) if self.run is not None else model_identity(self.model)
        self.note(outputs.KEY, outputs.keep(identity.digest, self.prompts.digest, max_tokens, top_n, candidate))

    def record(self, candidate: Sequence[Generation], info: RunInfo, max_tokens: int, top_n: int,
               reference: Sequence[Generation] | None = None, reference_info: RunInfo | None = None,
               reference_kind: str | None = None) -> Path | None:
        """Write the cell's generations (and the reference's, when one ran) into the golden directory; the file's
        path, or None when not recording."""
        run = self.run
        if run is None or run.record_dir is None:
            return None
        cell = Recorded(engine=self.cell.engine, params=_plain(self.cell.params), dtype=info.dtype,
                        device=info.device, version=info.version, runner=run.runner, fingerprint=run.fingerprint,
                        generations=run.with_text(self.model, candidate), attention_backend=info.attention_backend,
                        kv_cache_dtype=info.kv_cache_dtype)
        ref = None
        if reference is not None and reference_info is not None:
            ref = Recorded(engine=reference_info.engine, params={}, dtype=reference_info.dtype,
                           device=reference_info.device, version=reference_info.version, runner=run.runner,
                           fingerprint=run.fingerprint, generations=run.with_text(self.model, reference),
                           kind=reference_kind, attention_backend=reference_info.attention_backend,
                           kv_cache_dtype=reference_info.kv_cache_dtype)
        golden = GoldenFile(model=run.identity(self.model), prompts_name=self.prompts.name,
                            prompts_digest=self.prompts.digest, max_tokens=max_tokens, top_n=top_n, reference=ref,
                            cells={self.cell.id: cell}, prompts=tuple(self.prompts.to_dict()["prompts"]))
        path = record(run.record_dir, golden)
        self.note("golden_recorded", path.name)
        return path


def _plain(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as JSON has them (a cell's values are data from the matrices: scalars or lists)."""
    return {str(k): (list(v) if isinstance(v, tuple) else v) for k, v in params.items()}
