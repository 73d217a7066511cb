"""Pure rules: what a value means and what follows from it, with no database, no network and no settings.

Run states and their transitions, what a handler may raise (``actions``), what an
attempt returned (``outcome``), bounds on sizes, cron expressions, workflow
graphs (``dag``), memory presets, the tables of functions registered in code
(``callables``, ``handlers``), bounded JSON text and the checks of setting
values. Together with ``retry/`` and ``resilience/`` this is the bottom layer:
it imports nothing else of the package (docs/architecture.md, "Layers").
"""
