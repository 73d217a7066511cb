"""Periodic duties a worker runs for the whole cluster: each on one host at a time.

A duty is a small service with ``run_once(now)`` (River's ``runOnce``, Oban's
plugins): validated options with named defaults, a result with counts, batched
work, and leadership taken for the length of one transaction so that exactly one
host does it per round (DESIGN §6).
"""
