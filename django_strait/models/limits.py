"""Counter rows for a job's rate limit, shared by every worker (DESIGN §5)."""

from __future__ import annotations

from django.db import models


class JobRateWindow(models.Model):
    """How many runs of a job started in one fixed rate-limit window.

    Windows are aligned to the Unix epoch (``floor(epoch / window) * window``)
    so every worker agrees on them. Claims keep at most the current window of a
    job: older rows are deleted by the statement that counts in a new one.
    """

    job = models.ForeignKey("django_strait.Job", on_delete=models.CASCADE, related_name="+")
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "window_start"], name="strait_rate_window_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} @ {self.window_start:%Y-%m-%d %H:%M:%S}: {self.count}"
