"""Process execution (docs/process-execution.md): Python handlers in warm child processes with memory presets.

- ``pool``: the worker's side: spawns children, hands each a run over a pipe,
  watches its memory, its deadline and whether the run is still the worker's,
  and kills it when one of them says so;
- ``child``: the child's side: sets Django up once, then runs one handler per
  message and sends back what it did;
- ``wire``: what crosses the pipe (JSON), and what a dead child's exit means.
"""
