"""Operations on a namespace: inspection, dead letters, delayed jobs, queues, metrics and
health.
"""
