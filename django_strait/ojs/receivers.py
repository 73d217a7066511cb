"""What the OJS binding does when a workflow ends: Django signal receivers, connected in ready().

A surface's receivers live with the surface (services never import one): the app's
``ready()`` imports this module in every process, the worker's included, since a
batch's last job may end there (an ack, a nack, the reaper). The OJS workflows
module (and through it DRF) is imported only when an OJS workflow ends: imported
at start, it made every worker ~11 MB larger (70 -> 81 MB peak RSS in a drain).
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from django_strait import signals


@receiver(signals.workflow_completed, dispatch_uid="django_strait.ojs_batch_callbacks")
@receiver(signals.workflow_failed, dispatch_uid="django_strait.ojs_batch_callbacks_failed")
def ojs_batch_callbacks(
    sender: type, workflow_run_id: int, workflow: Any = "", **kwargs: Any
) -> None:
    """An OJS batch whose jobs have all ended queues its callbacks (docs/ojs.md, Workflows)."""
    if isinstance(workflow, str) and workflow.startswith("ojs-"):
        from django_strait.ojs.flows import fire_callbacks

        fire_callbacks(workflow_run_id)
