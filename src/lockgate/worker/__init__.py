"""The worker: its loop, runner, settler, scheduler, registry, liveness, events and activity
counts.
"""
