"""The claim as the worker makes it: claim, gate and start in one transaction, then presets.

The claim brings back with each run what executing it needs, process runs'
presets included (the run's own after an OOM kill, its job's recommendation
while it lasts): choosing a process run's preset reads no more rows
(docs/process-execution.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from django_strait.conf import strait_settings
from django_strait.models import Execution
from django_strait.storage import Claimed, Storage
from django_strait.storage.floors import ClaimFloors
from django_strait.transitions import claim_and_start
from django_strait.worker.catalog import Catalog
from django_strait.worker.gate import Gate


class Claimer:
    """Claims and starts runs for one worker, on the thread it is called from."""

    def __init__(
        self,
        storage: Storage,
        gate: Gate,
        catalog: Catalog,
        *,
        worker_id: str,
        queues: Sequence[str],
    ) -> None:
        self.storage = storage
        self.gate = gate
        self.catalog = catalog
        self.worker_id = worker_id
        self.queues = tuple(queues)
        # Where this worker's claims start (PostgreSQL): see storage.floors.
        self.floors = ClaimFloors(rescan=strait_settings.CLAIM_RESCAN_INTERVAL)

    def claim_and_start(self, limit: int, isolate: bool = False) -> list[Claimed]:
        """Claim up to ``limit`` runs, gate them and start those let through (``isolate``:
        job by job, after a claim that raised); each process run gets its preset."""
        runs = claim_and_start(
            self.worker_id,
            queues=self.queues,
            limit=limit,
            gate=self.gate,
            isolate=isolate,
            job_names=lambda job_id: self.catalog.get(job_id).name,
            storage=self.storage,
            floors=self.floors,
        )
        self.choose_presets(runs)
        return runs

    def choose_presets(self, runs: Sequence[Claimed]) -> None:
        """Give each process run the preset its attempt runs at: its own (after an OOM),
        else its job's, raised to the job's recommendation (``presets.Chain.start``)."""
        chain = strait_settings.PRESETS
        for run in runs:
            if self._is_process(run.job_id):
                job = self.catalog.get(run.job_id).row
                run.preset = chain.start(job.preset, run.run_preset, run.recommended_preset or None)

    def _is_process(self, job_id: int) -> bool:
        try:
            info = self.catalog.get(job_id)
        except KeyError:
            return False
        return info.row.execution == Execution.PROCESS and info.handler is not None
