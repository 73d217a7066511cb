"""Budgets (docs/resilience.md): a project's daily budget and its ledger, one row per day."""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from django_strait.rules import bounds

COST_FIELD = {"max_digits": 18, "decimal_places": 6}


class Project(models.Model):
    """A budget owner: the jobs that name it share one daily budget."""

    name = models.SlugField(max_length=200, unique=True)
    daily_budget = models.DecimalField(
        **COST_FIELD,
        validators=bounds.within(*bounds.COST),
        help_text="What the project's jobs may spend per day (in the unit of their costs).",
    )
    soft_limit_ratio = models.FloatField(
        default=0.8,
        validators=bounds.within(*bounds.SOFT_LIMIT_RATIO),
        help_text="At this share of the budget committed, one budget_soft_limit signal a day.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class BudgetLedger(models.Model):
    """One project's day: what is reserved by runs in flight and what was spent."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="ledger")
    day = models.DateField()
    reserved = models.DecimalField(**COST_FIELD, default=Decimal(0))
    spent = models.DecimalField(**COST_FIELD, default=Decimal(0))
    #: When this day's soft-limit signal fired (it fires once a day).
    soft_warning_sent_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-day", "project"]
        constraints = [
            models.UniqueConstraint(fields=["project", "day"], name="strait_ledger_project_day")
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day}: spent {self.spent}, reserved {self.reserved}"


class BudgetReservation(models.Model):
    """A reservation made on the control database for a run of another database's claim.

    With several databases, budgets live on the control database
    (``STRAIT["CONTROL_DATABASE"]``): a claim on another alias reserves here, in a
    transaction of its own, before its own commits. This row says which run (on
    which alias, at which attempt) holds ``amount`` of ``day``'s ledger, so that
    the record's settlement, or the reaper when that claim rolled back or its
    worker died, closes it exactly once (docs/operations.md).
    """

    #: The alias of the run's database (``STRAIT["DATABASES"]``).
    database = models.CharField(max_length=100)
    run_id = models.BigIntegerField()
    attempt = models.IntegerField()
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="reservations")
    day = models.DateField()
    amount = models.DecimalField(**COST_FIELD)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["database", "run_id", "attempt"], name="strait_reservation_run_attempt"
            )
        ]
        indexes = [models.Index(fields=["database", "created_at"], name="strait_reservation_age")]

    def __str__(self) -> str:
        return f"{self.database} run {self.run_id} attempt {self.attempt}: {self.amount}"
