"""Pure values and decisions: configuration, the job codec, arguments, read policies, retries,
outcomes, status records, cron, rate limits, log hygiene. Nothing here does I/O.
"""
