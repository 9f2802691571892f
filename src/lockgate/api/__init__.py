"""What users' code calls: App, Task, idempotency claims, eager mode, hooks, the running job's
context.
"""
