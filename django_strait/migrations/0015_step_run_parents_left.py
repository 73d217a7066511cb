"""Step runs for a wide DAG: a count of parents left, fewer indexes to keep, room for HOT updates.

- ``WorkflowStepRun.parents_left``: the DAG starts a waiting step when it reaches
  0, instead of reading all its parents. Step runs that wait in workflow runs
  already under way get their count here, from their step's parents and those
  parents' step runs, as the DAG would.
- ``workflow_run`` loses its own index: the unique (workflow_run, step) index
  serves every lookup by workflow run.
- PostgreSQL: the table keeps half of each page free (fillfactor 50), so that a
  step run's status change (not indexed) is a HOT update that touches no index:
  a 1,000-wide fan-in writes 1,000 of them.
"""

import django.db.models.deletion
from django.db import migrations, models

ENDED_WELL = "completed"


def count_parents_left(apps, schema_editor):
    WorkflowStepRun = apps.get_model("django_strait", "WorkflowStepRun")
    alias = schema_editor.connection.alias
    rows = WorkflowStepRun.objects.using(alias)
    waiting = rows.filter(status="waiting", workflow_run__status__in=["running", "failed"])
    for wr_id in set(waiting.values_list("workflow_run_id", flat=True)):
        steps = rows.filter(workflow_run_id=wr_id).values_list(
            "pk", "status", "step__name", "step__depends_on", "step__continue_on_failure"
        )
        done = {
            name
            for _, status, name, _, lenient in steps
            if status == ENDED_WELL or (status == "failed" and lenient)
        }
        present = {name for _, _, name, _, _ in steps}
        for pk, status, _, depends_on, _ in steps:
            if status == "waiting":
                left = sum(1 for p in depends_on if p in present and p not in done)
                rows.filter(pk=pk).update(parents_left=left)


def set_fillfactor(percent):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            table = schema_editor.quote_name("django_strait_workflowsteprun")
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {percent})")

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("django_strait", "0014_notify_by_statement_clock"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowsteprun",
            name="parents_left",
            field=models.IntegerField(default=0, editable=False),
        ),
        migrations.RunPython(count_parents_left, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="workflowsteprun",
            name="workflow_run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="step_runs",
                to="django_strait.workflowrun",
            ),
        ),
        migrations.RunPython(set_fillfactor(50), set_fillfactor(100)),
    ]
